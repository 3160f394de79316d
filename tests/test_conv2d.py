"""im2win.conv2d on NumPy arrays (the CPU path) against the float64 reference."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, strategies as st

import im2win
from helpers import from_layout, problems, random_arrays, to_layout
from im2win import cpu, reference
from im2win.problem import make_problem
from im2win.testing import assert_close

DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]

AWKWARD = [  # x (N, C, H, W), w (K, C/G, R, S), keyword arguments (INPUTS.md rows 21-25)
    ((2, 3, 7, 5), (4, 3, 3, 3), dict()),
    ((3, 5, 13, 17), (7, 5, 1, 1), dict()),                                   # 1 x 1, stride 1
    ((2, 5, 13, 17), (7, 5, 1, 1), dict(stride=2)),                           # 1 x 1, stride 2
    ((2, 4, 5, 6), (3, 4, 5, 6), dict()),                                     # P = Q = 1
    ((1, 3, 13, 13), (5, 3, 3, 3), dict(stride=4)),                           # stride > kernel
    ((2, 2, 17, 9), (3, 2, 5, 1), dict(stride=(3, 2))),                       # R > sh >= S
    ((3, 2, 7, 5), (5, 2, 2, 3), dict(padding=((0, 3), (2, 1)))),             # asymmetric
    ((1, 6, 11, 3), (4, 3, 3, 3), dict(groups=2, padding=(1, 0))),            # Q = 1
    ((2, 3, 9, 2), (2, 3, 2, 2), dict()),                                     # W < a vector
    ((1, 6, 12, 10), (6, 1, 3, 3), dict(groups=6, padding="same")),           # depthwise
    ((2, 4, 19, 11), (6, 2, 3, 2), dict(groups=2, dilation=(2, 3), stride=(1, 2))),
    ((1, 3, 10, 10), (4, 3, 2, 4), dict(padding="same", dilation=2)),         # even kernel
    ((1, 2, 3, 3), (3, 2, 3, 3), dict(padding=5)),                            # rows of padding
]


def poisoned_out(prob):
    """An output buffer full of NaN, so that an element the path does not write fails."""
    return np.full(prob.y_shape, np.nan, prob.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", AWKWARD)
def test_matches_reference_on_awkward_shapes(rng, dtype, layout, x_shape, w_shape, kwargs):
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0], dtype)
    x, w = to_layout(layout, x, w)
    prob = make_problem(x, w, b, layout=layout, **kwargs)
    out = poisoned_out(prob)
    y = im2win.conv2d(x, w, b, layout=layout, out=out, **kwargs)
    assert y is out and y.dtype == dtype and y.shape == prob.y_shape
    ref = reference.conv2d(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64),
                           layout=layout, **kwargs)
    assert_close(y, ref, dtype, prob.reduction)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_small_blocks_cover_every_row(rng, monkeypatch, layout):
    """Force one output row per block: every block boundary must still be right."""
    monkeypatch.setattr(cpu, "BLOCK_BYTES", 1)
    x, w, b = random_arrays(rng, (2, 4, 15, 9), (6, 2, 3, 2), 6, np.float32)
    x, w = to_layout(layout, x, w)
    kwargs = dict(groups=2, stride=(2, 1), padding=((3, 1), (0, 2)), dilation=(2, 1))
    prob = make_problem(x, w, b, layout=layout, **kwargs)
    assert cpu.rows_per_block(prob) == 1
    y = im2win.conv2d(x, w, b, layout=layout, out=poisoned_out(prob), **kwargs)
    assert_close(y, reference.conv2d(x, w, b, layout=layout, **kwargs), np.float32,
                 prob.reduction)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", [
    ((1, 1, 1, 1), (1, 1, 1, 1), dict(stride=(3, 1), padding=((2, 0), (0, 0)))),
    ((1, 3, 2, 5), (2, 3, 3, 3), dict(padding=4)),
    ((2, 2, 3, 4), (2, 2, 2, 2), dict(padding=((6, 5), (1, 1)), stride=(2, 1), dilation=2)),
])
def test_blocks_wholly_inside_the_padding(rng, monkeypatch, layout, x_shape, w_shape, kwargs):
    """One row per block, some blocks reading only padding rows above or below x."""
    monkeypatch.setattr(cpu, "BLOCK_BYTES", 1)
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0], np.float64)
    x, w = to_layout(layout, x, w)
    prob = make_problem(x, w, b, layout=layout, **kwargs)
    y = im2win.conv2d(x, w, b, layout=layout, out=poisoned_out(prob), **kwargs)
    assert_close(y, reference.conv2d_direct(x, w, b, layout=layout, **kwargs), np.float64,
                 prob.reduction)


@given(problem=problems(), layout=st.sampled_from(["NCHW", "NHWC"]),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**32 - 1))
def test_random_problems_match_reference(problem, layout, dtype, seed):
    x_shape, w_shape, kwargs = problem
    x, w, b = random_arrays(np.random.default_rng(seed), x_shape, w_shape, w_shape[0], dtype)
    x, w = to_layout(layout, x, w)
    prob = make_problem(x, w, b, layout=layout, **kwargs)
    y = im2win.conv2d(x, w, b, layout=layout, out=poisoned_out(prob), **kwargs)
    assert_close(y, reference.conv2d(x, w, b, layout=layout, **kwargs), dtype, prob.reduction)


@given(problem=problems(), seed=st.integers(0, 2**32 - 1))
def test_layouts_agree(problem, seed):
    x_shape, w_shape, kwargs = problem
    x, w, b = random_arrays(np.random.default_rng(seed), x_shape, w_shape, w_shape[0],
                            np.float32)
    y_nchw = im2win.conv2d(x, w, b, **kwargs)
    y_nhwc = im2win.conv2d(*to_layout("NHWC", x, w), b, layout="NHWC", **kwargs)
    prob = make_problem(x, w, b, **kwargs)
    assert_close(from_layout("NHWC", y_nhwc), y_nchw, np.float32, prob.reduction)


@given(problem=problems(max_n=4), layout=st.sampled_from(["NCHW", "NHWC"]),
       seed=st.integers(0, 2**32 - 1), data=st.data())
def test_batch_slices_and_repeats_are_bitwise_equal(problem, layout, seed, data):
    """INPUTS.md row 30: determinism and chunk invariance."""
    x_shape, w_shape, kwargs = problem
    x, w, b = random_arrays(np.random.default_rng(seed), x_shape, w_shape, w_shape[0],
                            np.float32)
    x, w = to_layout(layout, x, w)
    a = data.draw(st.integers(0, x_shape[0]))
    c = data.draw(st.integers(a, x_shape[0]))
    y = im2win.conv2d(x, w, b, layout=layout, **kwargs)
    np.testing.assert_array_equal(y, im2win.conv2d(x, w, b, layout=layout, **kwargs))
    np.testing.assert_array_equal(y[a:c], im2win.conv2d(x[a:c], w, b, layout=layout, **kwargs))


def test_large_batch_slice_is_bitwise_equal(rng):
    x, w, b = random_arrays(rng, (9, 16, 20, 20), (32, 16, 3, 3), 32, np.float32)
    np.testing.assert_array_equal(im2win.conv2d(x, w, b)[3:7], im2win.conv2d(x[3:7], w, b))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_inputs_are_never_modified(rng, layout):
    x, w, b = random_arrays(rng, (2, 4, 9, 8), (6, 2, 3, 3), 6, np.float16)
    x, w = to_layout(layout, x, w)
    copies = [a.copy() for a in (x, w, b)]
    for a in (x, w, b):
        a.flags.writeable = False          # a write would raise
    im2win.conv2d(x, w, b, groups=2, padding=1, layout=layout)
    for a, before in zip((x, w, b), copies):
        np.testing.assert_array_equal(a, before)


def test_array_likes_are_accepted():
    x = [[[[1.0, 2.0], [3.0, 4.0]]]]
    y = im2win.conv2d(x, [[[[1.0]]]], [0.5])
    np.testing.assert_array_equal(y, np.array(x) + 0.5)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_non_contiguous_inputs(rng, layout):
    """INPUTS.md row 26: slices, negative strides, a channels-last view, an odd base offset."""
    x_big, w_big, b = random_arrays(rng, (3, 8, 21, 17), (5, 8, 4, 3), 5, np.float32)
    x = x_big[::2, 1::2, ::-1, 3:]                     # strided, reversed, offset
    w = w_big[:, ::2, ::-1, :]
    x, w = to_layout(layout, x, w)
    assert not x.flags.c_contiguous and not w.flags.c_contiguous
    y = im2win.conv2d(x, w, b, layout=layout, stride=(2, 1))
    ref = reference.conv2d(np.ascontiguousarray(x), np.ascontiguousarray(w), b, layout=layout,
                           stride=(2, 1))
    assert_close(y, ref, np.float32, 4 * 4 * 3)
    channels_last_view = np.ascontiguousarray(x_big.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    assert_close(im2win.conv2d(channels_last_view, w_big), reference.conv2d(x_big, w_big),
                 np.float32, 8 * 4 * 3)
    fortran = np.asfortranarray(x_big)
    assert_close(im2win.conv2d(fortran, np.asfortranarray(w_big)),
                 reference.conv2d(x_big, w_big), np.float32, 8 * 4 * 3)


def test_misaligned_and_byte_swapped_inputs(rng):
    """A base pointer 2 bytes off float32 alignment, and big-endian data: same answer."""
    x, w, b = random_arrays(rng, (2, 3, 9, 7), (4, 3, 3, 2), 4, np.float32)
    raw = np.zeros(x.nbytes + 2, np.uint8)
    misaligned = np.ndarray(x.shape, np.float32, buffer=raw, offset=2)
    misaligned[...] = x
    assert misaligned.ctypes.data % 4 == 2
    expected = reference.conv2d(x, w, b)
    assert_close(im2win.conv2d(misaligned, w, b), expected, np.float32, 18)
    swapped = [a.astype(a.dtype.newbyteorder(">")) for a in (x, w, b)]
    y = im2win.conv2d(*swapped)
    assert y.dtype == np.float32 and y.dtype.isnative
    assert_close(y, expected, np.float32, 18)


def test_empty_batch_gives_empty_result():
    """INPUTS.md row 19."""
    y = im2win.conv2d(np.zeros((0, 3, 8, 8), np.float16), np.ones((4, 3, 3, 3), np.float16))
    assert y.shape == (0, 4, 6, 6) and y.dtype == np.float16


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_zero_channels_give_bias(layout):
    """INPUTS.md row 20: C = 0 gives zeros plus bias, as PyTorch does."""
    x, w = to_layout(layout, np.zeros((2, 0, 5, 5), np.float32), np.zeros((3, 0, 2, 2),
                                                                           np.float32))
    b = np.array([1.0, -2.0, 3.0], np.float32)
    y = from_layout(layout, im2win.conv2d(x, w, b, layout=layout))
    assert y.shape == (2, 3, 4, 4)
    np.testing.assert_array_equal(y, np.broadcast_to(b[:, None, None], y.shape))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_nan_and_inf_propagate_as_in_reference(rng, layout):
    """INPUTS.md row 27."""
    x, w, b = random_arrays(rng, (1, 2, 6, 6), (2, 2, 3, 3), 2, np.float32)
    x[0, 0, 1, 1], x[0, 1, 4, 4], w[1, 0, 0, 0] = np.nan, np.inf, np.inf
    x, w = to_layout(layout, x, w)
    y, ref = im2win.conv2d(x, w, b, layout=layout), reference.conv2d(x, w, b, layout=layout)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(y), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(y), np.isneginf(ref))
    assert np.isnan(y).any()


def test_float16_accumulates_past_65504():
    """INPUTS.md row 27: partial sums above the float16 range must not overflow."""
    x = np.array([40000.0, 40000.0, -40000.0], np.float16).reshape(1, 3, 1, 1)
    y = im2win.conv2d(x, np.ones((1, 3, 1, 1), np.float16))
    assert y.dtype == np.float16 and y[0, 0, 0, 0] == 40000.0


def test_integer_valued_inputs_give_exact_results(rng):
    x = rng.integers(-8, 8, (2, 5, 11, 9)).astype(np.float32)
    w = rng.integers(-8, 8, (4, 5, 3, 2)).astype(np.float32)
    np.testing.assert_array_equal(im2win.conv2d(x, w, padding=1),
                                  reference.conv2d_direct(x, w, padding=1))
