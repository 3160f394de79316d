"""Every row of INPUTS.md that needs no GPU: bad input raises before any work, with its message."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

import im2win
from im2win import baselines, reference
from helpers import problems, to_layout
from im2win.problem import make_problem

ENTRY_POINTS = [im2win.conv2d, reference.conv2d, reference.conv2d_direct,
                baselines.im2col_gemm]
X = np.zeros((2, 4, 8, 8), np.float32)
Wt = np.zeros((6, 2, 3, 3), np.float32)           # groups=2 fits X


@pytest.fixture(params=ENTRY_POINTS, ids=lambda f: f"{f.__module__}.{f.__name__}")
def conv(request):
    return request.param


def call(conv, x=X, w=Wt, bias=None, **kwargs):
    return conv(x, w, bias, **kwargs)


def test_row01_input_not_4d(conv):
    with pytest.raises(ValueError, match=r"expected 4-D input \(N, C, H, W\).*\(4, 8, 8\)"):
        call(conv, x=X[0])
    with pytest.raises(ValueError, match=r"expected 4-D input \(N, H, W, C\)"):
        call(conv, x=X[None], layout="NHWC")


def test_row02_weight_not_4d(conv):
    with pytest.raises(ValueError, match=r"expected 4-D weight \(K, C/G, R, S\)"):
        call(conv, w=Wt[0])
    with pytest.raises(ValueError, match=r"expected 4-D weight \(K, R, S, C/G\)"):
        call(conv, x=X.transpose(0, 2, 3, 1), w=Wt[0], layout="NHWC")


def test_row03_channel_mismatch(conv):
    with pytest.raises(ValueError, match=r"given groups=1 and weight of shape \(6, 2, 3, 3\), "
                                         r"expected input .* to have 2 channels, but got 4"):
        call(conv)


@pytest.mark.parametrize("groups, w_shape", [(4, (6, 1, 3, 3)), (8, (6, 1, 3, 3))])
def test_row04_filters_not_divisible_by_groups(conv, groups, w_shape):
    x = np.zeros((1, groups, 8, 8), np.float32)
    with pytest.raises(ValueError, match="divisible by groups"):
        call(conv, x=x, w=np.zeros(w_shape, np.float32), groups=groups)


@pytest.mark.parametrize("groups, error", [(0, ValueError), (-1, ValueError),
                                           (2.0, TypeError), ("2", TypeError),
                                           (True, TypeError), (None, TypeError)])
def test_row05_bad_groups(conv, groups, error):
    with pytest.raises(error, match="groups"):
        call(conv, groups=groups)


@pytest.mark.parametrize("stride", [0, -1, (1, 0), (0, 2)])
def test_row06_non_positive_stride(conv, stride):
    with pytest.raises(ValueError, match="non-positive stride is not supported"):
        call(conv, groups=2, stride=stride)


@pytest.mark.parametrize("padding", [-1, (0, -1), ((0, 0), (-2, 0))])
def test_row07_negative_padding(conv, padding):
    with pytest.raises(ValueError, match="negative padding is not supported"):
        call(conv, groups=2, padding=padding)


@pytest.mark.parametrize("dilation", [0, -2, (1, 0)])
def test_row08_non_positive_dilation(conv, dilation):
    with pytest.raises(ValueError, match="dilation should be greater than zero"):
        call(conv, groups=2, dilation=dilation)


@pytest.mark.parametrize("x_shape, w_shape, kwargs, sizes", [
    ((1, 1, 1, 1), (1, 1, 10, 10), {}, r"\(1 x 1\).*\(10 x 10\)"),
    ((1, 1, 5, 5), (1, 1, 3, 3), dict(dilation=3), r"\(5 x 5\).*\(7 x 7\)"),
    ((1, 1, 5, 5), (1, 1, 3, 3), dict(dilation=3, padding=(1, 0)), r"\(7 x 5\).*\(7 x 7\)"),
])
def test_row09_kernel_larger_than_padded_input(conv, x_shape, w_shape, kwargs, sizes):
    with pytest.raises(ValueError, match=sizes):
        call(conv, x=np.zeros(x_shape, np.float32), w=np.zeros(w_shape, np.float32), **kwargs)


@pytest.mark.parametrize("name, value", [
    ("stride", (1, 1, 1)), ("stride", ()), ("dilation", [1]), ("padding", (1, 1, 1, 1)),
    ("padding", ((1, 1), (1, 1), (1, 1))), ("padding", ((1, 1, 1), (1, 1))),
    ("padding", ((1, 1), 1)), ("stride", range(3)), ("padding", np.array([1, 1, 1])),
    ("dilation", np.array([1, 1, 1])),
])
def test_row10_wrong_sequence_length(conv, name, value):
    with pytest.raises(ValueError, match=name):
        call(conv, groups=2, **{name: value})


# A padding string is row 12's case instead (ValueError unless "valid" or "same").
@pytest.mark.parametrize("name, value", [
    (name, value) for name in ("stride", "padding", "dilation")
    for value in (1.5, "2", True, (1, 1.0), None, np.float32(1))
    if not (name == "padding" and isinstance(value, str))])
def test_row11_non_integer_hyper_parameter(conv, name, value):
    with pytest.raises(TypeError, match=name):
        call(conv, groups=2, **{name: value})


def test_row10_any_sequence_of_the_right_length(conv):
    """A range or an array is a sequence like a tuple (not "an int")."""
    y = call(conv, groups=2, stride=range(1, 3), padding=np.array([[1, 0], [0, 2]]),
             dilation=np.array([1, 1]))
    np.testing.assert_array_equal(y, call(conv, groups=2, stride=(1, 2),
                                          padding=((1, 0), (0, 2))))


def test_row11_numpy_integers_are_integers(conv):
    y = call(conv, groups=np.int64(2), stride=(np.int32(1), 2), padding=np.uint8(1))
    assert y.shape == (2, 6, 8, 4)


@pytest.mark.parametrize("padding, stride", [("full", 1), ("SAME", 1), ("same", 2),
                                             ("same", (1, 2))])
def test_row12_bad_padding_string(conv, padding, stride):
    with pytest.raises(ValueError, match="padding"):
        call(conv, groups=2, padding=padding, stride=stride)


@pytest.mark.parametrize("bias_shape", [(5,), (6, 1), (1, 6), ()])
def test_row13_bias_shape(conv, bias_shape):
    with pytest.raises(ValueError, match=r"expected bias of shape \(6,\)"):
        call(conv, groups=2, bias=np.zeros(bias_shape, np.float32))


@pytest.mark.parametrize("x_dtype, w_dtype, b_dtype", [
    (np.float32, np.float64, None), (np.float16, np.float32, None),
    (np.float32, np.float32, np.float64),
])
def test_row14_mixed_dtypes(conv, x_dtype, w_dtype, b_dtype):
    bias = None if b_dtype is None else np.zeros(6, b_dtype)
    with pytest.raises(TypeError, match="same dtype.*float"):
        call(conv, x=X.astype(x_dtype), w=Wt.astype(w_dtype), bias=bias, groups=2)


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.bool_, np.complex64, np.uint16,
                                   np.longdouble])
def test_row15_unsupported_dtype(conv, dtype):
    if np.dtype(dtype) == np.float64:
        pytest.skip("long double is float64 on this platform")
    with pytest.raises(TypeError, match="supported dtypes are float16, bfloat16"):
        call(conv, x=X.astype(dtype), w=Wt.astype(dtype), groups=2)


@pytest.mark.parametrize("layout, error", [("nchw", ValueError), ("CHWN", ValueError),
                                           ("", ValueError), (None, TypeError)])
def test_row16_bad_layout(conv, layout, error):
    with pytest.raises(error, match="layout must be 'NCHW' or 'NHWC'"):
        call(conv, groups=2, layout=layout)


@pytest.mark.parametrize("name, value", [(name, value) for name in ("x", "w", "bias")
                                         for value in (None, "abc", object())
                                         if not (name == "bias" and value is None)])
def test_arrays_of_no_numbers_are_a_type_error(name, value):
    args = dict(x=X, w=Wt, bias=None)
    args[name] = value
    with pytest.raises(TypeError, match=f"{name} must be an array of numbers"):
        im2win.conv2d(args["x"], args["w"], args["bias"], groups=2)


def test_a_missing_array_beside_gpu_arrays_is_a_type_error(monkeypatch):
    """None for x or w (or dy) beside CuPy arrays (here a stand-in CuPy module, as
    arrays.on_gpu recognises its arrays): the same TypeError as on the CPU."""
    import sys
    import types

    class ndarray:
        shape, dtype = X.shape, X.dtype

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(ndarray=ndarray))
    for call in (lambda: im2win.conv2d(ndarray(), None),
                 lambda: im2win.conv2d(None, ndarray()),
                 lambda: im2win.conv2d_backward_data(ndarray(), None, X.shape),
                 lambda: im2win.conv2d_backward_filter(None, ndarray(), Wt.shape)):
        with pytest.raises(TypeError, match="must be an array of numbers, got NoneType"):
            call()


def test_row28_an_output_past_any_buffer(conv):
    with pytest.raises(ValueError, match=r"more than 2\*\*63 bytes"):
        call(conv, groups=2, padding=2 ** 40)


def test_byte_swapped_arrays_are_checked_before_they_are_copied():
    """A big-endian x is copied into native order only once every check has passed (a bad
    call allocates nothing of its size); a good one gives the native result."""
    import tracemalloc
    x = np.ones((16, 64, 32, 32), ">f4")                          # 4 MiB
    w = np.ones((4, 64, 3, 3), ">f4")
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="groups"):
            im2win.conv2d(x, w, groups=0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < x.nbytes // 4
    small = x[:2, :, :6, :6]
    np.testing.assert_array_equal(im2win.conv2d(small, w),
                                  im2win.conv2d(small.astype(np.float32), w.astype(np.float32)))
    assert small.dtype == ">f4"


class TestRow18Out:
    def test_wrong_shape(self):
        with pytest.raises(ValueError, match=r"out has shape \(2, 6, 6, 5\), expected "
                                             r"\(2, 6, 6, 6\)"):
            im2win.conv2d(X, Wt, groups=2, out=np.empty((2, 6, 6, 5), np.float32))

    def test_wrong_dtype(self):
        with pytest.raises(TypeError, match="out has dtype float64, expected float32"):
            im2win.conv2d(X, Wt, groups=2, out=np.empty((2, 6, 6, 6)))

    def test_not_an_array(self):
        with pytest.raises(TypeError, match="out must be a numpy.ndarray"):
            im2win.conv2d(X, Wt, groups=2, out=[[0.0]])

    def test_read_only(self):
        out = np.empty((2, 6, 6, 6), np.float32)
        out.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            im2win.conv2d(X, Wt, groups=2, out=out)

    def test_overlapping_input(self):
        buf = np.zeros(X.size + 2 * 6 * 6 * 6, np.float32)
        x = buf[:X.size].reshape(X.shape)
        out = buf[X.size - 10:X.size - 10 + 2 * 6 * 6 * 6].reshape(2, 6, 6, 6)
        with pytest.raises(ValueError, match="out overlaps x"):
            im2win.conv2d(x, Wt, groups=2, out=out)

    def test_out_between_the_elements_of_an_input(self):
        """x and out channel slices of one buffer (a concatenation): no element shared, so out
        is written and x is not; an out sharing one element with x is refused."""
        rng = np.random.default_rng(0)
        for layout, take in (("NCHW", lambda b, s: b[:, s]), ("NHWC", lambda b, s: b[..., s])):
            shape = (2, 10, 8, 8) if layout == "NCHW" else (2, 8, 8, 10)
            buf = rng.uniform(-1, 1, shape).astype(np.float32)
            x, out = take(buf, slice(0, 4)), take(buf, slice(4, 10))
            w = to_layout(layout, X, rng.uniform(-1, 1, Wt.shape).astype(np.float32))[1]
            before, expected = x.copy(), im2win.conv2d(x.copy(), w, groups=2, layout=layout,
                                                      padding=1)
            assert im2win.conv2d(x, w, groups=2, layout=layout, padding=1, out=out) is out
            np.testing.assert_array_equal(out, expected)
            np.testing.assert_array_equal(x, before)
            with pytest.raises(ValueError, match="out overlaps x"):
                im2win.conv2d(x, w, groups=2, layout=layout, padding=1,
                              out=take(buf, slice(3, 9)))

    def test_gpu_arrays_overlap_by_their_elements(self, monkeypatch):
        """On CuPy arrays the same exact test, from their device pointers, shapes and strides
        alone (stand-ins never read: here at an address nothing is mapped at)."""
        import sys
        import types

        from im2win.arrays import shares_memory

        class ndarray:
            def __init__(self, view):           # a NumPy view's layout, 2**40 bytes on
                self.shape, self.strides, self.dtype = view.shape, view.strides, view.dtype
                offset = view.__array_interface__["data"][0] - buf.ctypes.data
                self.data = types.SimpleNamespace(ptr=2 ** 40 + offset)

        monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(ndarray=ndarray))
        buf = np.zeros((2, 10, 8, 8), np.float32)
        x = ndarray(buf[:, :4])
        assert not shares_memory(ndarray(buf[:, 4:]), x)
        assert shares_memory(ndarray(buf[:, 3:9]), x)
        assert shares_memory(ndarray(buf[1, ::-1]), x)
        assert not shares_memory(ndarray(buf[:, 4:, ::2]), ndarray(buf[:, 4:, 1::2]))

    def test_out_is_written_and_returned(self):
        out = np.full((2, 6, 6, 6), np.nan, np.float32)
        assert im2win.conv2d(X + 1, Wt + 1, groups=2, out=out) is out
        np.testing.assert_array_equal(out, np.full_like(out, 18.0))


def test_row20_empty_spatial_extent(conv):
    with pytest.raises(ValueError, match="non-zero H and W"):
        call(conv, x=np.zeros((2, 4, 0, 8), np.float32), groups=2, padding=2)


def test_checks_run_in_the_documented_order():
    """groups, padding, stride, dilation, ranks, groups divisibility, channels, bias, fit."""
    everything_wrong = dict(x=np.zeros((3,), np.float32), w=np.zeros((5, 3, 9, 9), np.float32),
                            bias=np.zeros(2, np.float32), groups=0, padding=-1, stride=0,
                            dilation=0)
    order = ["groups", "padding", "stride", "dilation", "4-D input"]
    for expected, fix in zip(order, [dict(groups=1), dict(padding=0), dict(stride=1),
                                     dict(dilation=1), dict(x=np.zeros((1, 4, 4, 4),
                                                                       np.float32))]):
        with pytest.raises(ValueError, match=expected):
            make_problem(everything_wrong["x"], everything_wrong["w"], everything_wrong["bias"],
                         **{k: v for k, v in everything_wrong.items()
                            if k in ("groups", "padding", "stride", "dilation")})
        everything_wrong.update(fix)
    for expected, fix in [("channels", dict(w=np.zeros((5, 4, 9, 9), np.float32))),
                          ("bias", dict(bias=np.zeros(5, np.float32))),
                          ("kernel", dict(w=np.zeros((5, 4, 3, 3), np.float32)))]:
        with pytest.raises(ValueError, match=expected):
            make_problem(everything_wrong["x"], everything_wrong["w"], everything_wrong["bias"],
                         **{k: v for k, v in everything_wrong.items()
                            if k in ("groups", "padding", "stride", "dilation")})
        everything_wrong.update(fix)
    make_problem(everything_wrong["x"], everything_wrong["w"], everything_wrong["bias"])


def test_same_padding_puts_the_odd_extra_at_the_bottom_right():
    prob = make_problem(np.zeros((1, 1, 9, 9)), np.zeros((1, 1, 4, 2)), padding="same",
                        dilation=(1, 3))
    assert (prob.pt, prob.pb, prob.pl, prob.pr) == (1, 2, 1, 2)
    assert (prob.P, prob.Q) == (9, 9)


# One corruption of an otherwise valid call, and the error it must raise.
CORRUPTIONS = [
    (dict(groups=0), ValueError), (dict(groups=1.0), TypeError),
    (dict(stride=-1), ValueError), (dict(stride=(1, 2, 3)), ValueError),
    (dict(stride="1"), TypeError), (dict(padding=-3), ValueError),
    (dict(padding="zero"), ValueError), (dict(padding=0.5), TypeError),
    (dict(dilation=0), ValueError), (dict(dilation=(1, False)), TypeError),
    (dict(layout="HWCN"), ValueError), (dict(x_rank=3), ValueError), (dict(w_rank=5), ValueError),
    (dict(x_channels=1), ValueError), (dict(bias_len=1), ValueError),
    (dict(w_dtype=np.float16), TypeError), (dict(dtype=np.int16), TypeError),
]


@given(problem=problems(), layout=st.sampled_from(["NCHW", "NHWC"]),
       corruption=st.sampled_from(CORRUPTIONS), conv=st.sampled_from(ENTRY_POINTS))
def test_every_invalid_case_raises_the_right_error(problem, layout, corruption, conv):
    x_shape, w_shape, kwargs = problem
    bad, error = corruption
    dtype = bad.get("dtype", np.float32)
    x = np.ones(x_shape[:1] + (x_shape[1] + bad.get("x_channels", 0),) + x_shape[2:], dtype)
    x, w = to_layout(layout, x, np.ones(w_shape, bad.get("w_dtype", dtype)))
    x = np.ones(x.shape[1:], x.dtype) if "x_rank" in bad else x
    w = w[None] if "w_rank" in bad else w
    bias = np.ones(w_shape[0] + bad.get("bias_len", 0), dtype)
    kwargs = kwargs | {k: v for k, v in bad.items() if k in ("groups", "stride", "padding",
                                                              "dilation", "layout")}
    kwargs.setdefault("layout", layout)
    with pytest.raises(error):
        conv(x, w, bias, **kwargs)
