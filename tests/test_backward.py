"""The two gradients of conv2d: exact adjoints, against tap-by-tap oracles and finite
differences, with the forward's argument checks; as forward convolutions (im2win.gradients,
what the GPU runs) on the CPU and, where there is one, on the GPU."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import im2win
from helpers import contiguous_strides, problems, random_arrays, to_layout
from im2win import gradients, reference
from im2win.problem import make_backward_data_problem, make_backward_filter_problem
from im2win.testing import allowed_error, relative_error

AWKWARD = [((3, 5, 13, 11), (7, 5, 3, 2), dict(padding=1, stride=(2, 1))),
           ((2, 6, 19, 11), (10, 3, 3, 2), dict(groups=2, stride=(2, 3), dilation=(1, 2),
                                                padding=((2, 0), (1, 3)))),
           ((1, 3, 23, 23), (13, 3, 5, 5), dict(stride=4)),                  # stride > kernel
           ((2, 4, 9, 9), (4, 1, 3, 3), dict(groups=4, padding="same")),     # depthwise
           ((5, 8, 7, 5), (9, 8, 7, 5), dict())]                             # P = Q = 1


def case(rng, layout, x_shape, w_shape, dtype=np.float64):
    x, w, _ = random_arrays(rng, x_shape, w_shape, w_shape[0], dtype, bias=False)
    return to_layout(layout, x, w)


def inner(a, b):
    return float(np.sum(np.asarray(a, np.float64) * np.asarray(b, np.float64)))


@settings(max_examples=40, deadline=None)
@given(problem=problems(max_n=2), layout=st.sampled_from(["NCHW", "NHWC"]),
       seed=st.integers(0, 2**16))
def test_both_gradients_are_exact_adjoints(problem, layout, seed):
    """<conv2d(x, w), dy> == <x, backward_data(dy, w)> == <w, backward_filter(x, dy)>."""
    x_shape, w_shape, kwargs = problem
    rng = np.random.default_rng(seed)
    x, w = case(rng, layout, x_shape, w_shape)
    y = reference.conv2d(x, w, layout=layout, **kwargs)
    dy = rng.uniform(-1, 1, y.shape)
    dx = im2win.conv2d_backward_data(dy, w, x.shape, layout=layout, **kwargs)
    dw = im2win.conv2d_backward_filter(x, dy, w.shape, layout=layout, **kwargs)
    assert dx.shape == x.shape and dw.shape == w.shape
    forward = inner(y, dy)
    scale = max(abs(forward), np.abs(y).sum() + 1.0)
    assert abs(inner(x, dx) - forward) <= 1e-12 * scale
    assert abs(inner(w, dw) - forward) <= 1e-12 * scale


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", AWKWARD)
def test_windows_agree_with_the_tap_by_tap_oracles(rng, layout, x_shape, w_shape, kwargs):
    x, w = case(rng, layout, x_shape, w_shape)
    dy = rng.uniform(-1, 1, reference.conv2d(x, w, layout=layout, **kwargs).shape)
    np.testing.assert_allclose(
        reference.conv2d_backward_data(dy, w, x.shape, layout=layout, **kwargs),
        reference.conv2d_backward_data_direct(dy, w, x.shape, layout=layout, **kwargs),
        rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        reference.conv2d_backward_filter(x, dy, w.shape, layout=layout, **kwargs),
        reference.conv2d_backward_filter_direct(x, dy, w.shape, layout=layout, **kwargs),
        rtol=0, atol=1e-11)


def test_finite_differences(rng):
    """The loss L = <conv2d(x, w), dy>: central differences along random directions."""
    x, w = case(rng, "NCHW", (2, 3, 9, 8), (4, 3, 3, 2))
    kwargs = dict(stride=2, padding=1, dilation=(2, 1))
    dy = rng.uniform(-1, 1, reference.conv2d(x, w, **kwargs).shape)
    loss = lambda x, w: inner(reference.conv2d(x, w, **kwargs), dy)  # noqa: E731
    u, v, h = rng.standard_normal(x.shape), rng.standard_normal(w.shape), 1e-3
    dx = im2win.conv2d_backward_data(dy, w, x.shape, **kwargs)
    dw = im2win.conv2d_backward_filter(x, dy, w.shape, **kwargs)
    assert (loss(x + h * u, w) - loss(x - h * u, w)) / (2 * h) == pytest.approx(inner(dx, u),
                                                                              rel=1e-9)
    assert (loss(x, w + h * v) - loss(x, w - h * v)) / (2 * h) == pytest.approx(inner(dw, v),
                                                                              rel=1e-9)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_results_keep_the_dtype_and_round_the_float64_sums_once(rng, dtype):
    x, w = case(rng, "NHWC", (2, 4, 7, 6), (5, 4, 3, 3), dtype)
    dy = rng.uniform(-1, 1, (2, 5, 4, 5)).astype(dtype)
    dx = im2win.conv2d_backward_data(dy, w, x.shape, layout="NHWC")
    dw = im2win.conv2d_backward_filter(x, dy, w.shape, layout="NHWC")
    assert dx.dtype == dtype and dw.dtype == dtype
    wide = [a.astype(np.float64) for a in (x, w, dy)]
    np.testing.assert_array_equal(dx, reference.conv2d_backward_data_direct(
        wide[2], wide[1], x.shape, layout="NHWC").astype(dtype))
    np.testing.assert_array_equal(dw, reference.conv2d_backward_filter_direct(
        wide[0], wide[2], w.shape, layout="NHWC").astype(dtype))


def test_empty_batch_and_zero_channels(rng):
    w = rng.uniform(-1, 1, (4, 3, 3, 3))
    assert im2win.conv2d_backward_data(np.zeros((0, 4, 6, 6)), w, (0, 3, 8, 8)).shape == \
        (0, 3, 8, 8)
    dw = im2win.conv2d_backward_filter(np.zeros((0, 3, 8, 8)), np.zeros((0, 4, 6, 6)),
                                       (4, 3, 3, 3))
    assert dw.shape == (4, 3, 3, 3) and not dw.any()
    dx = im2win.conv2d_backward_data(np.ones((2, 4, 6, 6)), np.zeros((4, 0, 3, 3)),
                                     (2, 0, 8, 8))
    assert dx.shape == (2, 0, 8, 8)


@pytest.mark.parametrize("call, error, match", [
    (lambda dy, w, x: im2win.conv2d_backward_data(dy[:, :, 1:], w, x.shape), ValueError,
     r"expected dy of shape \(2, 4, 6, 6\)"),
    (lambda dy, w, x: im2win.conv2d_backward_data(dy.astype(np.float32), w, x.shape),
     TypeError, "dy and weight must have the same dtype"),
    (lambda dy, w, x: im2win.conv2d_backward_filter(x.astype(np.float32), dy, w.shape),
     TypeError, "dy and x must have the same dtype"),
    (lambda dy, w, x: im2win.conv2d_backward_data(dy, w, (2, 3, 8)), ValueError,
     "x_shape must have 4 entries"),
    (lambda dy, w, x: im2win.conv2d_backward_data(dy, w, "2x3x8x8"), TypeError,
     "x_shape must be a sequence of 4 ints"),
    (lambda dy, w, x: im2win.conv2d_backward_filter(x, dy, (4, 3, 3.0, 3)), TypeError,
     "w_shape must be an int"),
    (lambda dy, w, x: im2win.conv2d_backward_data(dy, w, x.shape, stride=0), ValueError,
     "non-positive stride"),
    (lambda dy, w, x: im2win.conv2d_backward_filter(x, dy, w.shape, groups=2), ValueError,
     "groups=2"),
    (lambda dy, w, x: im2win.conv2d_backward_data(dy, w.astype(np.int32), x.shape), TypeError,
     "weight has dtype int32"),
    (lambda dy, w, x: im2win.conv2d_backward_data(None, w, x.shape), TypeError,
     "dy must be an array of numbers"),
    (lambda dy, w, x: im2win.conv2d_backward_filter(x, "dy", w.shape), TypeError,
     "dy must be an array of numbers"),
    (lambda dy, w, x: im2win.conv2d_backward_data(dy.astype(">f8"), w, x.shape, groups=0),
     ValueError, "non-positive groups"),
])
def test_bad_arguments_are_refused_before_any_work(rng, call, error, match):
    x, w = case(rng, "NCHW", (2, 3, 8, 8), (4, 3, 3, 3))
    dy = rng.uniform(-1, 1, (2, 4, 6, 6))
    before = [a.copy() for a in (x, w, dy)]
    with pytest.raises(error, match=match):
        call(dy, w, x)
    for a, b in zip((x, w, dy), before):
        np.testing.assert_array_equal(a, b)                  # nothing the caller passed changed


def test_array_likes_and_views(rng):
    x, w = case(rng, "NCHW", (2, 3, 8, 8), (4, 3, 3, 3))
    dy = rng.uniform(-1, 1, (2, 4, 6, 6))
    np.testing.assert_array_equal(
        im2win.conv2d_backward_data(dy.tolist(), w[::-1][::-1], x.shape),
        im2win.conv2d_backward_data(dy, w, x.shape))
    np.testing.assert_array_equal(
        im2win.conv2d_backward_filter(x[:, ::-1][:, ::-1], dy, list(w.shape)),
        im2win.conv2d_backward_filter(x, dy, w.shape))


@pytest.mark.parametrize("x_shape, w_shape, kwargs, torch_kwargs", [
    ((3, 5, 13, 11), (7, 5, 3, 2), dict(padding=1, stride=(2, 1)), dict(padding=1, stride=(2, 1))),
    ((2, 6, 19, 11), (10, 3, 3, 2), dict(groups=2, stride=(2, 3), dilation=(1, 2), padding=2),
     dict(groups=2, stride=(2, 3), dilation=(1, 2), padding=2)),
    ((1, 3, 23, 23), (13, 3, 5, 5), dict(stride=4), dict(stride=4))])
def test_against_pytorch(rng, x_shape, w_shape, kwargs, torch_kwargs):
    torch = pytest.importorskip("torch")
    x, w = case(rng, "NCHW", x_shape, w_shape)
    dy = rng.uniform(-1, 1, reference.conv2d(x, w, **kwargs).shape)
    tx, tw, tdy = (torch.from_numpy(a) for a in (x, w, dy))
    np.testing.assert_allclose(im2win.conv2d_backward_data(dy, w, x.shape, **kwargs),
                               torch.nn.grad.conv2d_input(x.shape, tw, tdy, **torch_kwargs),
                               rtol=0, atol=1e-11)
    np.testing.assert_allclose(im2win.conv2d_backward_filter(x, dy, w.shape, **kwargs),
                               torch.nn.grad.conv2d_weight(tx, w.shape, tdy, **torch_kwargs),
                               rtol=0, atol=1e-10)


@settings(max_examples=60, deadline=None)
@given(problem=problems(max_n=2), layout=st.sampled_from(["NCHW", "NHWC"]),
       seed=st.integers(0, 2**16))
def test_gradients_as_forward_convolutions_match_the_reference(problem, layout, seed):
    """im2win.gradients (what CuPy arrays run): every element of dx and dw written (both
    poisoned with NaN first) and equal to the reference's float64 sums, here through the CPU's
    forward conv2d on views of dy, w and x."""
    x_shape, w_shape, kwargs = problem
    rng = np.random.default_rng(seed)
    x, w = case(rng, layout, x_shape, w_shape)
    dy = rng.uniform(-1, 1, reference.conv2d(x, w, layout=layout, **kwargs).shape)
    prob = make_backward_data_problem(dy, w, x.shape, layout=layout, **kwargs)
    dx = gradients.backward_data(im2win.conv2d, prob, dy, w, np.full(x.shape, np.nan))
    ref = reference.conv2d_backward_data(dy, w, x.shape, layout=layout, **kwargs)
    np.testing.assert_allclose(dx, ref, rtol=0, atol=1e-13 * (1 + np.abs(ref).max(initial=0)))
    prob = make_backward_filter_problem(x, dy, w.shape, layout=layout, **kwargs)
    dw = gradients.backward_filter(im2win.conv2d, prob, x, dy, np.full(w.shape, np.nan))
    ref = reference.conv2d_backward_filter(x, dy, w.shape, layout=layout, **kwargs)
    np.testing.assert_allclose(dw, ref, rtol=0, atol=1e-13 * (1 + np.abs(ref).max(initial=0)))


@settings(max_examples=60, deadline=None)
@given(problem=problems(max_n=1), layout=st.sampled_from(["NCHW", "NHWC"]),
       flip=st.booleans(), seed=st.integers(0, 2**16))
def test_phase_filter_gather_reads_what_the_view_copy_reads(problem, layout, flip, seed):
    """gradients.phase_filter_gather (the GPU's one-launch re-order) describes, for every
    phase and for a w of any strides (here also a reversed view), the same elements as
    phase_filter's copy of a view of w."""
    x_shape, w_shape, kwargs = problem
    rng = np.random.default_rng(seed)
    x, w = case(rng, layout, x_shape, w_shape)
    if flip:                                     # negative strides: read the view's elements
        w = w[::-1, ..., ::-1] if layout == "NCHW" else w[::-1, :, ::-1]
    dy = np.empty(reference.conv2d(x, w, layout=layout, **kwargs).shape)
    prob = make_backward_data_problem(dy, w, x.shape, layout=layout, **kwargs)
    letters = "NCHW" if layout == "NCHW" else "NHWC"
    strides = dict(zip(letters, (s // w.itemsize for s in w.strides)))
    strides = tuple(strides[c] for c in "NCHW")
    for _, _, rows, cols in gradients._phases(prob):
        if not rows[0] or not cols[0]:
            continue
        want = gradients.phase_filter(prob, w, rows[1], cols[1])
        dims, along, offset = gradients.phase_filter_gather(prob, rows[1], cols[1], strides)
        assert want.shape == (dims[0] * dims[1],) + dims[2:]     # api._data_direct's buffer
        at = {}                                  # w's elements by offset from its first
        for index in np.ndindex(w.shape):
            at[sum(i * s for i, s in zip(index, (t // w.itemsize for t in w.strides)))] = w[index]
        got = np.array([at[offset + sum(i * a for i, a in zip(index, along))]
                        for index in np.ndindex(dims)]).reshape(dims)
        np.testing.assert_array_equal(got.reshape(want.shape), want)


GPU = pytest.mark.skipif(not im2win.cuda.is_available(), reason="needs CuPy and a visible CUDA GPU")


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", AWKWARD + [
    ((4, 64, 9, 10), (64, 64, 3, 3), dict(padding=1)),                  # the Tensor-Core kernels
    ((3, 32, 12, 11), (48, 16, 3, 3), dict(groups=2, stride=2, padding=1))])
def test_gpu_gradients_match_the_reference(rng, dtype, layout, x_shape, w_shape, kwargs):
    """CuPy arrays: both gradients against the float64 reference on the same rounded inputs,
    within the forward's tolerance for their reduction lengths; dw the same bits twice."""
    import cupy
    x, w = case(rng, layout, x_shape, w_shape)
    x, w = x.astype(dtype), w.astype(dtype)
    dy = rng.uniform(-1, 1, reference.conv2d(x, w, layout=layout, **kwargs).shape).astype(dtype)
    wide = [a.astype(np.float64) for a in (x, w, dy)]
    cx, cw, cdy = (cupy.asarray(a) for a in (x, w, dy))
    dx = im2win.conv2d_backward_data(cdy, cw, x.shape, layout=layout, **kwargs)
    dw = im2win.conv2d_backward_filter(cx, cdy, w.shape, layout=layout, **kwargs)
    assert isinstance(dx, cupy.ndarray) and dx.dtype == dtype and dw.dtype == dtype
    prob = make_backward_data_problem(dy, w, x.shape, layout=layout, **kwargs)
    data_red = prob.Kg * prob.R * prob.S
    filter_red = prob.N * prob.P * prob.Q
    ref = reference.conv2d_backward_data(wide[2], wide[1], x.shape, layout=layout, **kwargs)
    assert relative_error(cupy.asnumpy(dx), ref) <= allowed_error(dtype, data_red)
    ref = reference.conv2d_backward_filter(wide[0], wide[2], w.shape, layout=layout, **kwargs)
    assert relative_error(cupy.asnumpy(dw), ref) <= allowed_error(dtype, filter_red)
    again = im2win.conv2d_backward_filter(cx, cdy, w.shape, layout=layout, **kwargs)
    cupy.testing.assert_array_equal(again, dw)                    # deterministic: no atomics


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", [
    ((3, 64, 9, 10), (64, 64, 3, 3), dict(padding=1)),
    ((2, 32, 11, 7), (48, 16, 3, 2), dict(groups=2, dilation=(2, 1),
                                          padding=((2, 1), (0, 1)))),
    ((2, 8, 6, 6), (8, 8, 1, 1), dict())])
def test_gpu_backward_data_in_one_phase_launch(rng, dtype, layout, x_shape, w_shape, kwargs):
    """Stride 1 (api._data_direct: the filter gathered by one launch, then the phase's
    Executable): every element of a NaN-poisoned dx written, the same bits as the phase
    convolution through conv2d (gradients.backward_data), within the reference's tolerance;
    w a reversed view."""
    import cupy
    from im2win import api
    x, w = case(rng, layout, x_shape, w_shape)
    x, w = x.astype(dtype), w.astype(dtype)
    dy = rng.uniform(-1, 1, reference.conv2d(x, w, layout=layout, **kwargs).shape).astype(dtype)
    cw = cupy.asarray(np.ascontiguousarray(w[::-1]))[::-1]          # negative strides
    cdy = cupy.asarray(dy)
    prob = make_backward_data_problem(cdy, cw, x.shape, layout=layout, **kwargs)
    ready = api._data_direct(prob, cdy, cw)
    assert ready is not None
    dx = cupy.full(x.shape, cupy.nan, dtype)
    ready(cdy, cw, dx)
    phases = gradients.backward_data(im2win.conv2d, prob, cdy, cw, cupy.empty(x.shape, dtype))
    cupy.testing.assert_array_equal(dx, phases)
    ref = reference.conv2d_backward_data(dy.astype(np.float64), w.astype(np.float64), x.shape,
                                         layout=layout, **kwargs)
    assert relative_error(cupy.asnumpy(dx), ref) <= allowed_error(dtype, prob.Kg * prob.R *
                                                                   prob.S)


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
@pytest.mark.parametrize("x_shape, w_shape, kwargs, workspace", [
    ((3, 3, 23, 21), (16, 3, 11, 11), dict(stride=4), None),              # cv1's form
    ((4, 3, 17, 19), (24, 3, 7, 7), dict(stride=2, padding=3), 1 << 14),  # chunks of images
    ((2, 5, 12, 13), (8, 5, 3, 2), dict(stride=(2, 3), dilation=(2, 1),
                                        padding=((2, 0), (1, 3))), None),
    ((2, 1, 9, 9), (7, 1, 3, 3), dict(padding="same"), 1),                # one image a chunk
    ((2, 3, 10, 9), (4, 3, 5, 5), dict(stride=3, dilation=2, padding=1), None),
    ((3, 24, 7, 7), (40, 24, 3, 3), dict(), None)])           # many channels (float32: cv12's)
def test_gpu_backward_data_through_window_gradients(rng, dtype, x_shape, w_shape, kwargs,
                                                    workspace):
    """One group of few channels in NHWC (im2win.cuda.dgrad: cuBLAS's window gradients, then
    window_to_image): every element of a NaN-poisoned dx written, within the reference's
    tolerance for its reduction length, the same bits twice and through the public call."""
    import cupy
    from im2win.cuda import dgrad
    x, w = case(rng, "NHWC", x_shape, w_shape)
    x, w = x.astype(dtype), w.astype(dtype)
    dy = rng.uniform(-1, 1, reference.conv2d(x, w, layout="NHWC", **kwargs).shape).astype(dtype)
    cdy, cw = cupy.asarray(dy), cupy.asarray(w)
    prob = make_backward_data_problem(cdy, cw, x.shape, layout="NHWC", **kwargs)
    runner = dgrad.Runner(prob, *([] if workspace is None else [workspace]))
    dx = cupy.full(x.shape, cupy.nan, dtype)
    runner(cdy, cw, dx)
    ref = reference.conv2d_backward_data(dy.astype(np.float64), w.astype(np.float64), x.shape,
                                         layout="NHWC", **kwargs)
    assert relative_error(cupy.asnumpy(dx), ref) <= allowed_error(dtype, prob.K * prob.R *
                                                                   prob.S)
    again = cupy.full(x.shape, cupy.nan, dtype)
    runner(cdy, cw, again)
    cupy.testing.assert_array_equal(again, dx)
    if workspace is None and dgrad.pays(prob):
        cupy.testing.assert_array_equal(
            im2win.conv2d_backward_data(cdy, cw, x.shape, layout="NHWC", **kwargs), dx)


def test_which_problems_take_window_gradients():
    from im2win.cuda import dgrad
    from im2win.layers import LAYERS
    from im2win.problem import make_problem

    def layer(name, layout="NHWC", dtype=np.float16):
        spec = LAYERS[name]
        x, w = spec.shapes(2, layout)
        forward = make_problem(np.empty(x, dtype), np.empty(w, dtype), layout=layout,
                               stride=spec.stride)
        return make_backward_data_problem(np.empty(forward.y_shape, dtype), np.empty(w, dtype),
                                          x, layout=layout, stride=spec.stride)
    assert all(dgrad.pays(layer(n)) for n in ("cv1", "cv2", "cv3"))
    assert not any(dgrad.pays(layer(n)) for n in ("cv4", "cv7", "cv8", "cv12"))  # cv7: stride 1
    assert dgrad.pays(layer("cv7", dtype=np.float32))
    # float32 at stride 1: where full padding makes the phase do 1.3 times the work or more
    assert all(dgrad.pays(layer(n, dtype=np.float32)) for n in ("cv5", "cv6", "cv11", "cv12"))
    assert not any(dgrad.pays(layer(n, dtype=np.float32)) for n in ("cv4", "cv8", "cv9", "cv10"))
    assert not dgrad.pays(layer("cv1", "NCHW"))
    prob = layer("cv1")
    assert dgrad.chunk(prob) * prob.P * prob.Q * prob.R * prob.S * prob.C * 4 <= \
        dgrad.WORKSPACE
    assert dgrad.chunk(prob, 1) == 1 and dgrad.chunk(prob, 1 << 40) == prob.N


WGRAD_CASES = [  # NHWC problems the Hopper backward-filter kernel takes: C/G % 8 == 0
    # (wgrad.Tile: NC, box channels CB, SPLIT_N where K/G <= 64)
    ((4, 64, 20, 20), (64, 64, 3, 3), dict(padding=1)),       # 192, 64, split N; split-K
    ((2, 128, 7, 6), (200, 128, 3, 2), dict(stride=2, padding=(1, 0))),  # 256, 64; filter tail
    ((3, 128, 8, 9), (96, 64, 3, 3), dict(groups=2, dilation=2, padding=2)),   # groups
    ((1, 64, 5, 5), (8, 64, 1, 1), dict()),                   # 64, 64, split N: few filters
    ((2, 64, 6, 9), (16, 64, 1, 7), dict(padding=(0, 3))),    # a tile's boxes past the last
    ((2, 96, 9, 8), (40, 96, 3, 3), dict(padding=1)),         # C past a box: zeros
    ((2, 64, 8, 8), (48, 32, 3, 3), dict(groups=2, stride=2)),  # boxes across groups
    ((2, 8, 12, 12), (96, 8, 5, 5), dict(stride=2)),          # 256, 8
    ((2, 16, 12, 12), (136, 16, 3, 3), dict(padding=1)),      # 256, 8; filter tail
    ((3, 24, 10, 10), (136, 24, 3, 3), dict(padding=1)),      # 64 a box, 24 used; tail
    ((4, 16, 20, 20), (24, 16, 3, 3), dict(padding=1))]       # 128, 8, split N; split-K          # boxes cross groups


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", WGRAD_CASES)
def test_hopper_backward_filter_kernel(rng, dtype, x_shape, w_shape, kwargs):
    """im2win.cuda.wgrad where it applies (Hopper): against the reference, the same bits
    twice (split-K adds its partial sums in a fixed order)."""
    import cupy
    from im2win.cuda import compute_capability, wgrad
    if compute_capability(0) != 90:
        pytest.skip("the backward-filter kernel runs on compute capability 9.0")
    x, w = case(rng, "NHWC", x_shape, w_shape)
    x, w = x.astype(dtype), w.astype(dtype)
    dy = rng.uniform(-1, 1, reference.conv2d(x, w, layout="NHWC", **kwargs).shape).astype(dtype)
    cx, cdy = cupy.asarray(x), cupy.asarray(dy)
    prob = make_backward_filter_problem(cx, cdy, w.shape, layout="NHWC", **kwargs)
    assert wgrad.staged(prob, cx, cdy)[3] is None           # the kernel on x and dy as they lie
    dw = im2win.conv2d_backward_filter(cx, cdy, w.shape, layout="NHWC", **kwargs)
    ref = reference.conv2d_backward_filter(x.astype(np.float64), dy.astype(np.float64), w.shape,
                                           layout="NHWC", **kwargs)
    assert relative_error(cupy.asnumpy(dw), ref) <= allowed_error(dtype, prob.N * prob.P *
                                                                   prob.Q)
    again = im2win.conv2d_backward_filter(cx, cdy, w.shape, layout="NHWC", **kwargs)
    cupy.testing.assert_array_equal(again, dw)


FFMA_WGRAD_CASES = WGRAD_CASES[:4] + [  # float32 NHWC, K/G a multiple of 4
    ((2, 3, 23, 21), (96, 3, 11, 11), dict(stride=4)),         # cv1's form: one float a column
    ((3, 12, 9, 10), (24, 6, 3, 3), dict(groups=2, padding=((2, 0), (1, 3)))),
    ((2, 8, 15, 14), (132, 8, 5, 3), dict(stride=(2, 3), dilation=(1, 2), padding=2))]


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("x_shape, w_shape, kwargs", FFMA_WGRAD_CASES)
def test_float32_backward_filter_kernel(rng, x_shape, w_shape, kwargs):
    """im2win.cuda.wgrad_ffma on every tile, both x loads and several pixel splits, into a
    NaN-poisoned dw: against the reference, and the public call the same bits twice."""
    import cupy
    from im2win.cuda import launch, wgrad_ffma
    x, w = case(rng, "NHWC", x_shape, w_shape)
    x, w = x.astype(np.float32), w.astype(np.float32)
    dy = rng.uniform(-1, 1, reference.conv2d(x, w, layout="NHWC", **kwargs).shape).astype(
        np.float32)
    cx, cdy = cupy.asarray(x), cupy.asarray(dy)
    prob = make_backward_filter_problem(cx, cdy, w.shape, layout="NHWC", **kwargs)
    ref = reference.conv2d_backward_filter(x.astype(np.float64), dy.astype(np.float64), w.shape,
                                           layout="NHWC", **kwargs)
    tolerance = allowed_error(np.float32, prob.N * prob.P * prob.Q)
    strides = launch.element_strides(cx, "NHWC")
    for tile in wgrad_ffma.TILES:
        for vector in {False, wgrad_ffma.vector_x(prob, strides, cx.data.ptr)}:
            for splits in (None, 1, 5):
                dw = cupy.full(w.shape, cupy.nan, cupy.float32)
                wgrad_ffma.Runner(prob, strides, vector, tile, splits)(cx, cdy, dw)
                assert relative_error(cupy.asnumpy(dw), ref) <= tolerance, (tile, vector, splits)
    dw = im2win.conv2d_backward_filter(cx, cdy, w.shape, layout="NHWC", **kwargs)
    assert relative_error(cupy.asnumpy(dw), ref) <= tolerance
    again = im2win.conv2d_backward_filter(cx, cdy[:], w.shape, layout="NHWC", **kwargs)
    cupy.testing.assert_array_equal(again, dw)
    strided = cupy.asarray(np.pad(x, ((0, 0), (0, 0), (0, 1), (0, 0))))[:, :, :-1]  # a view
    cupy.testing.assert_array_equal(
        im2win.conv2d_backward_filter(strided, cdy, w.shape, layout="NHWC", **kwargs), dw)


def test_float32_backward_filter_plan():
    from im2win.cuda import wgrad_ffma
    from im2win.layers import LAYERS
    from im2win.problem import make_problem

    def layer(name):
        spec = LAYERS[name]
        x, w = spec.shapes(128, "NHWC")
        y = make_problem(np.empty(x, np.float32), np.empty(w, np.float32), layout="NHWC",
                         stride=spec.stride).y_shape
        return make_backward_filter_problem(np.empty(x, np.float32), np.empty(y, np.float32),
                                            w, layout="NHWC", stride=spec.stride)
    tiles = {n: wgrad_ffma.choose(layer(n), 132) for n in ("cv3", "cv4", "cv7", "cv8")}
    assert tiles["cv8"][0] == wgrad_ffma.Tile(128, 64, 16)
    assert tiles["cv4"][0] == wgrad_ffma.Tile(64, 128, 16)
    assert tiles["cv3"][0] == tiles["cv7"][0] == wgrad_ffma.Tile(64, 64, 16)
    for name, (tile, splits) in tiles.items():
        prob = layer(name)
        assert splits * prob.K * prob.reduction * 4 <= wgrad_ffma.WORKSPACE
        assert -(-prob.N * prob.P * prob.Q // splits) >= wgrad_ffma.MIN_SLICES * tile.BK
    assert wgrad_ffma.refusal(layer("cv8"), 0) is None
    assert "16-byte" in wgrad_ffma.refusal(layer("cv8"), 4)
    small = make_backward_filter_problem(np.empty((1, 5, 5, 8), np.float32),
                                         np.empty((1, 3, 3, 6), np.float32), (6, 3, 3, 8),
                                         layout="NHWC")
    assert "multiple of 4" in wgrad_ffma.refusal(small, 0)
    assert wgrad_ffma.choose(small, 132)[1] == 1                   # too few pixels to split


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("layout, x_shape, w_shape, kwargs", [
    ("NCHW", (2, 64, 9, 8), (40, 64, 3, 3), dict(padding=1)),      # copied channels-last
    ("NHWC", (2, 3, 13, 20), (16, 3, 3, 3), dict(stride=2)),        # C = 3 padded to 8
    ("NCHW", (3, 3, 11, 10), (24, 3, 3, 3), dict(padding=1)),       # both
    ("NHWC", (2, 5, 12, 13), (8, 5, 3, 3), dict(stride=(1, 3), dilation=(1, 2),
                                                 padding=(1, 2))),  # C = 5, dilated
    ("NHWC", (2, 3, 9, 9), (16, 3, 2, 30), dict(padding=(0, 12))),  # a wide filter
    ("NHWC", (2, 3, 13, 12), (16, 3, 5, 5), dict(stride=2)),        # window columns
    ("NCHW", (2, 3, 20, 19), (24, 3, 5, 7), dict(stride=(2, 3), padding=(2, 3))),   # both
    ("NHWC", (2, 4, 16, 17), (8, 4, 3, 5), dict(stride=(1, 2), dilation=(1, 2),
                                                 padding=(1, 4))),  # columns, dilated
    ("NCHW", (45, 3, 13, 14), (16, 3, 5, 5), dict(stride=2, padding=1))])  # more rows of x
    # than the columns copy has blocks: its two row buffers take turns
def test_hopper_backward_filter_kernel_after_copies(rng, layout, x_shape, w_shape, kwargs):
    import cupy
    from im2win.cuda import compute_capability, wgrad
    if compute_capability(0) != 90:
        pytest.skip("the backward-filter kernel runs on compute capability 9.0")
    x, w = case(rng, layout, x_shape, w_shape)
    x, w = x.astype(np.float16), w.astype(np.float16)
    dy = rng.uniform(-1, 1, reference.conv2d(x, w, layout=layout, **kwargs).shape).astype(
        np.float16)
    cx, cdy = cupy.asarray(x), cupy.asarray(dy)
    prob = make_backward_filter_problem(cx, cdy, w.shape, layout=layout, **kwargs)
    assert wgrad.staged(prob, cx, cdy)[3] is not None       # through a buffer
    dw = im2win.conv2d_backward_filter(cx, cdy, w.shape, layout=layout, **kwargs)
    ref = reference.conv2d_backward_filter(x.astype(np.float64), dy.astype(np.float64), w.shape,
                                           layout=layout, **kwargs)
    assert dw.shape == w.shape
    assert relative_error(cupy.asnumpy(dw), ref) <= allowed_error(np.float16, prob.N * prob.P *
                                                                   prob.Q)
    if layout == "NHWC" and wgrad.columns_pay(prob):   # the remembered calls' three launches
        direct = wgrad.columns_direct(prob)
        poisoned = cupy.full(w.shape, cupy.nan, np.float16)
        direct(cx, cdy, poisoned)
        cupy.testing.assert_array_equal(poisoned, dw)


@pytest.mark.parametrize("seed", range(40))
def test_window_columns_turn_the_filter_gradient_into_an_r_by_1_one(seed):
    """What wgrad.window_columns relies on: x2[n, h, q, s*C + c] = xp[n, h, q*sw + s*dw, c]
    (xp: x padded across) makes dw the gradient of an R x 1 filter over x2 with S*C channels
    (stride 1 and no padding across), (s, c) flattened; and which problems take that path."""
    from im2win.cuda import wgrad
    from im2win.problem import make_problem
    rng = np.random.default_rng(seed)
    C, S, R = int(rng.integers(1, 6)), int(rng.integers(2, 7)), int(rng.integers(1, 4))
    sh, sw, dh, dw_ = (int(v) for v in rng.integers(1, 4, 4))
    pt, pl = int(rng.integers(0, 3)), int(rng.integers(0, 4))
    x = rng.standard_normal((2, int(rng.integers(R * dh, R * dh + 6)),
                             int(rng.integers(S * dw_, S * dw_ + 8)), C))
    kwargs = dict(stride=(sh, sw), dilation=(dh, dw_), padding=((pt, pt), (pl, pl)))
    prob = make_problem(x, np.empty((3, R, S, C)), layout="NHWC", **kwargs)
    inner = wgrad.columns_stage(prob)
    xp = np.pad(x, ((0, 0), (0, 0), (pl, pl + S * dw_), (0, 0)))
    x2 = np.zeros((2, prob.H, prob.Q, inner.C))
    for s in range(S):
        x2[..., s * C:(s + 1) * C] = xp[:, :, s * dw_:s * dw_ + (prob.Q - 1) * sw + 1:sw]
    dy = rng.standard_normal((2, prob.P, prob.Q, 3))
    want = reference.conv2d_backward_filter(x, dy, (3, R, S, C), layout="NHWC", **kwargs)
    got = reference.conv2d_backward_filter(x2, dy, (3, R, 1, inner.C), layout="NHWC",
                                           stride=(sh, 1), dilation=(dh, 1),
                                           padding=((pt, pt), (0, 0)))
    np.testing.assert_allclose(got[:, :, 0, :S * C].reshape(3, R, S, C), want, atol=1e-12)
    assert (inner.P, inner.Q) == (prob.P, prob.Q)


def test_which_problems_take_window_columns():
    from im2win.cuda import wgrad
    from im2win.layers import LAYERS
    from im2win.problem import make_problem

    def layer(name):
        spec = LAYERS[name]
        x, w = spec.shapes(128, "NHWC")
        return make_problem(np.empty(x, np.float16), np.empty(w, np.float16), layout="NHWC",
                            stride=spec.stride)
    assert wgrad.columns_pay(layer("cv1")) and wgrad.columns_pay(layer("cv3"))   # 11, 7 boxes
    assert not wgrad.columns_pay(layer("cv7"))          # 6 boxes of 8 in place of 9
    wide = make_problem(np.empty((1, 9, 40, 3), np.float16), np.empty((4, 2, 30, 3),
                                                                     np.float16), layout="NHWC")
    assert not wgrad.columns_pay(wide)                  # S*C = 90: more than a box


def test_hopper_backward_filter_plan():
    """Which problems the kernel takes, its tiles and split-K (no GPU needed)."""
    from im2win.cuda import wgrad
    from im2win.cuda.plan import specializations
    from im2win.problem import make_problem
    prob = make_problem(np.empty((128, 56, 56, 64), np.float16), np.empty((64, 3, 3, 64),
                                                                           np.float16),
                        layout="NHWC", padding=1)
    strides = contiguous_strides(prob)
    assert wgrad.refusal(prob, strides, 0, 0, 90) is None
    tile, splits = wgrad.choose(prob, 132)
    assert tile == wgrad.Tile(192, 64, True)                   # 9 boxes: 2 tiles of 6
    assert splits == 132 // 2                                  # one wave of items
    assert ("im2win_wgmma", tile.name("float16")) in specializations()
    assert all(t.smem <= 227 * 1024 for t in wgrad.TILES)
    big = make_problem(np.empty((8, 7, 7, 512), np.float16), np.empty((512, 3, 3, 512),
                                                                      np.float16),
                       layout="NHWC", padding=1)
    assert wgrad.choose(big, 132) == (wgrad.Tile(256, 64, False), 1)   # 4 x 18 tiles, 7 slices
    few = make_problem(np.empty((128, 56, 56, 8), np.float16), np.empty((96, 5, 5, 8),
                                                                        np.float16),
                       layout="NHWC", stride=2)
    assert wgrad.choose(few, 132)[0] == wgrad.Tile(256, 8, False)     # 25 boxes of 8 channels
    refused = [(dict(arch=80), "compute capability 9.0"),
               (dict(prob=make_problem(np.empty((2, 9, 9, 32), np.float16),
                                       np.empty((8, 3, 3, 4), np.float16), layout="NHWC",
                                       groups=8)),
                "multiple of 8"),
               (dict(x_ptr=8), "16-byte aligned"),
               (dict(prob=make_problem(np.empty((2, 9, 9, 64), np.float32),
                                       np.empty((8, 3, 3, 64), np.float32), layout="NHWC")),
                "float16 and bfloat16")]
    for change, match in refused:
        args = dict(prob=prob, x_strides=strides, x_ptr=0, dy_ptr=0, arch=90) | change
        if "prob" in change:
            args["x_strides"] = contiguous_strides(change["prob"])
        assert match in wgrad.refusal(**args)


@pytest.mark.gpu
@GPU
def test_gpu_gradients_check_every_call_after_one_is_remembered(rng):
    """A CuPy gradient call's checked problem is remembered by its shapes, strides, dtypes,
    devices and arguments (cuda.backward_key); a call that differs in any of them is checked
    again, and the remembered one gives the same bits."""
    import cupy
    x = cupy.asarray(rng.uniform(-1, 1, (2, 8, 6, 6)).astype(np.float32))
    w = cupy.asarray(rng.uniform(-1, 1, (4, 8, 3, 3)).astype(np.float32))
    dy = cupy.asarray(rng.uniform(-1, 1, (2, 4, 4, 4)).astype(np.float32))
    dw = im2win.conv2d_backward_filter(x, dy, w.shape)
    dx = im2win.conv2d_backward_data(dy, w, x.shape)
    cupy.testing.assert_array_equal(im2win.conv2d_backward_filter(x, dy, w.shape), dw)
    cupy.testing.assert_array_equal(im2win.conv2d_backward_data(dy, w, x.shape), dx)
    bad = [(lambda: im2win.conv2d_backward_filter(x, dy, (4, 8, 2, 2)), ValueError),
           (lambda: im2win.conv2d_backward_filter(x, dy.astype(cupy.float16), w.shape), TypeError),
           (lambda: im2win.conv2d_backward_filter(x, dy, w.shape, stride=2), ValueError),
           (lambda: im2win.conv2d_backward_filter(x, dy, w.shape, stride=1.0), TypeError),
           (lambda: im2win.conv2d_backward_data(dy, w, x.shape, padding=1), ValueError),
           (lambda: im2win.conv2d_backward_data(dy[:1], w, x.shape), ValueError)]
    for call, error in bad:
        with pytest.raises(error):
            call()


@pytest.mark.gpu
@GPU
def test_gpu_gradients_of_torch_tensors_come_back_as_torch_tensors(rng):
    """CUDA tensors of PyTorch in, PyTorch tensors out, on its current stream; against
    torch.nn.grad."""
    torch = pytest.importorskip("torch")
    x, w = case(rng, "NCHW", (2, 6, 19, 11), (10, 3, 3, 2))
    kwargs = dict(groups=2, stride=(2, 3), dilation=(1, 2), padding=2)
    dy = rng.uniform(-1, 1, reference.conv2d(x, w, **kwargs).shape)
    tx, tw, tdy = (torch.from_numpy(a).cuda() for a in (x, w, dy))
    dx = im2win.conv2d_backward_data(tdy, tw, x.shape, **kwargs)
    dw = im2win.conv2d_backward_filter(tx, tdy, w.shape, **kwargs)
    assert isinstance(dx, torch.Tensor) and dx.is_cuda and isinstance(dw, torch.Tensor)
    torch.testing.assert_close(dx, torch.nn.grad.conv2d_input(x.shape, tw, tdy, **kwargs),
                               rtol=0, atol=1e-11)
    torch.testing.assert_close(dw, torch.nn.grad.conv2d_weight(tx, w.shape, tdy, **kwargs),
                               rtol=0, atol=1e-10)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_window_to_image_is_the_adjoint_of_image_to_window(rng, layout):
    x, _ = case(rng, layout, (2, 3, 11, 9), (1, 3, 1, 1))
    kwargs = dict(stride=(3, 1), dilation=(2, 1), padding=((2, 1), (1, 3)), layout=layout)
    x_win = reference.image_to_window(x, 3, **kwargs)
    v = rng.uniform(-1, 1, x_win.shape)
    H, W = (x.shape[2], x.shape[3]) if layout == "NCHW" else (x.shape[1], x.shape[2])
    back = reference.window_to_image(v, H, W, 3, **kwargs)
    assert back.shape == x.shape
    assert inner(x_win, v) == pytest.approx(inner(x, back), rel=1e-13)


def test_device_messages_name_the_gradients_arguments(monkeypatch):
    """Arrays on two devices: the message calls them by the function's own names (a stand-in
    CuPy module, as arrays.on_gpu recognises its arrays)."""
    import sys
    import types

    class ndarray:
        device = types.SimpleNamespace(id=0)

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(ndarray=ndarray))
    with pytest.raises(TypeError, match=r"dy on the GPU \(CuPy\), w on the CPU"):
        im2win.conv2d_backward_data(ndarray(), np.ones((4, 3, 3, 3)), (2, 3, 8, 8))
    with pytest.raises(TypeError, match=r"x on the CPU, dy on the GPU \(CuPy\)"):
        im2win.conv2d_backward_filter(np.ones((2, 3, 8, 8)), ndarray(), (4, 3, 3, 3))
