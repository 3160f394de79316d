"""The reference against the spec's formulas, its worked example, the direct oracle and SciPy."""

import numpy as np
import pytest
import scipy.signal
from hypothesis import given, strategies as st

from helpers import from_layout, problems, random_arrays, to_layout
from im2win import reference


def test_worked_example_element_by_element():
    x = np.arange(12.0).reshape(1, 1, 4, 3)
    x_win = reference.image_to_window(x, 2, stride=2)
    assert x_win.shape == (1, 1, 2, 6)
    assert x_win[0, 0, 0].tolist() == [0, 3, 1, 4, 2, 5]
    assert x_win[0, 0, 1].tolist() == [6, 9, 7, 10, 8, 11]
    w = np.array([[[[2.0, 3.0], [5.0, 7.0]]]])                       # w00, w01, w10, w11
    w_win = reference.filter_to_window(w)
    assert w_win[0, 0].tolist() == [2, 5, 3, 7]                        # w00, w10, w01, w11
    y = reference.conv2d(x, w, stride=(2, 1))
    # y[0,0,0,1] reads x_win[0,0,0][2:6] = [1, 4, 2, 5] against w_win[0,0].
    assert y[0, 0, 0, 1] == 1 * 2 + 4 * 5 + 2 * 3 + 5 * 7
    assert y[0, 0, 0, 1] == x_win[0, 0, 0, 2:6] @ w_win[0, 0]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_image_to_window_matches_formula(rng, layout):
    N, C, H, W, R, sh, dh = 2, 3, 9, 5, 3, 2, 2
    (pt, pb), (pl, pr) = (1, 2), (3, 0)
    x, _ = to_layout(layout, rng.standard_normal((N, C, H, W)), np.zeros((1, C, 1, 1)))
    x_win = reference.image_to_window(x, R, stride=(sh, 5), dilation=(dh, 7),
                                      padding=((pt, pb), (pl, pr)), layout=layout)
    xp = np.pad(from_layout(layout, x), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    Hp, Wp = xp.shape[2:]
    P = (Hp - dh * (R - 1) - 1) // sh + 1
    assert x_win.shape == ((N, C, P, Wp * R) if layout == "NCHW" else (N, P, Wp * R, C))
    for n in range(N):
        for c in range(C):
            for p in range(P):
                for m in range(Wp):
                    for r in range(R):
                        got = (x_win[n, c, p, m * R + r] if layout == "NCHW"
                               else x_win[n, p, m * R + r, c])
                        assert got == xp[n, c, p * sh + r * dh, m]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_filter_to_window_matches_formula(rng, layout):
    K, Cg, R, S = 4, 3, 2, 5
    _, w = to_layout(layout, np.zeros((1, Cg, 1, 1)), rng.standard_normal((K, Cg, R, S)))
    w_win = reference.filter_to_window(w, layout=layout)
    for k, c, r, s in np.ndindex(K, Cg, R, S):
        if layout == "NCHW":
            assert w_win[k, c, s * R + r] == w[k, c, r, s]
        else:
            assert w_win[k, s * R + r, c] == w[k, r, s, c]


AWKWARD = [  # x (N, C, H, W), w (K, C/G, R, S), keyword arguments
    ((2, 3, 7, 5), (4, 3, 3, 3), dict()),
    ((1, 2, 13, 17), (3, 2, 2, 5), dict(stride=(2, 3), padding=(1, 2))),
    ((3, 4, 11, 7), (6, 2, 3, 2), dict(groups=2, dilation=(2, 1), padding="same")),
    ((1, 6, 9, 9), (6, 1, 3, 3), dict(groups=6, stride=4)),                   # depthwise, s > R
    ((2, 1, 10, 6), (2, 1, 5, 1), dict(stride=(2, 1))),                       # R > sh >= S
    ((1, 5, 4, 4), (2, 5, 4, 4), dict()),                                     # P = Q = 1
    ((2, 3, 6, 6), (5, 3, 1, 1), dict(stride=2)),                             # 1 x 1
    ((1, 2, 5, 3), (3, 2, 2, 3), dict(padding=((0, 3), (2, 1)), dilation=(3, 1))),
    ((1, 3, 8, 2), (2, 3, 3, 1), dict(padding="valid")),                      # Q = 1-ish widths
]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", AWKWARD)
def test_reference_matches_direct_oracle(rng, layout, x_shape, w_shape, kwargs):
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
    x, w = to_layout(layout, x, w)
    y = reference.conv2d(x, w, b, layout=layout, **kwargs)
    oracle = reference.conv2d_direct(x, w, b, layout=layout, **kwargs)
    np.testing.assert_allclose(y, oracle, rtol=1e-12, atol=1e-12)


def scipy_conv2d(x, w, b, stride, pads, dilation, groups):
    """NCHW convolution from scipy.signal.correlate, one (image, filter, channel) at a time.

    `pads` is (pt, pb, pl, pr), resolved by hand so that no library code is shared.
    """
    (sh, sw), (dh, dw), (pt, pb, pl, pr) = stride, dilation, pads
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    K, Cg, R, S = w.shape
    dilated = np.zeros((K, Cg, dh * (R - 1) + 1, dw * (S - 1) + 1))
    dilated[:, :, ::dh, ::dw] = w
    out = []
    for n in range(x.shape[0]):
        maps = []
        for k in range(K):
            g = k // (K // groups)
            acc = sum(scipy.signal.correlate(xp[n, g * Cg + c], dilated[k, c], mode="valid")
                      for c in range(Cg))
            maps.append(acc[::sh, ::sw] + b[k])
        out.append(maps)
    return np.array(out)


@given(problem=problems(max_n=2), layout=st.sampled_from(["NCHW", "NHWC"]),
       seed=st.integers(0, 2**32 - 1))
def test_reference_matches_scipy(problem, layout, seed):
    x_shape, w_shape, kwargs = problem
    x, w, b = random_arrays(np.random.default_rng(seed), x_shape, w_shape, w_shape[0])
    padding, (R, S), (dh, dw) = kwargs["padding"], w_shape[2:], kwargs["dilation"]
    if padding == "same":
        th, tw = dh * (R - 1), dw * (S - 1)
        pads = (th // 2, th - th // 2, tw // 2, tw - tw // 2)
    elif padding == "valid":
        pads = (0, 0, 0, 0)
    elif isinstance(padding, int):
        pads = (padding,) * 4
    elif isinstance(padding[0], int):
        pads = (padding[0], padding[0], padding[1], padding[1])
    else:
        pads = (*padding[0], *padding[1])
    expected = scipy_conv2d(x, w, b, kwargs["stride"], pads, kwargs["dilation"],
                            kwargs["groups"])
    y = reference.conv2d(*to_layout(layout, x, w), b, layout=layout, **kwargs)
    np.testing.assert_allclose(from_layout(layout, y), expected.reshape(from_layout(layout, y).shape),
                               rtol=1e-10, atol=1e-10)


@given(problem=problems(), seed=st.integers(0, 2**32 - 1))
def test_reference_layouts_agree(problem, seed):
    x_shape, w_shape, kwargs = problem
    x, w, b = random_arrays(np.random.default_rng(seed), x_shape, w_shape, w_shape[0])
    y_nchw = reference.conv2d(x, w, b, **kwargs)
    y_nhwc = reference.conv2d(*to_layout("NHWC", x, w), b, layout="NHWC", **kwargs)
    np.testing.assert_allclose(from_layout("NHWC", y_nhwc), y_nchw, rtol=1e-12, atol=1e-12)


@given(problem=problems(max_n=4), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_reference_batch_slices_are_bitwise_equal(problem, seed, data):
    x_shape, w_shape, kwargs = problem
    x, w, b = random_arrays(np.random.default_rng(seed), x_shape, w_shape, w_shape[0])
    a = data.draw(st.integers(0, x_shape[0]))
    c = data.draw(st.integers(a, x_shape[0]))
    np.testing.assert_array_equal(reference.conv2d(x, w, b, **kwargs)[a:c],
                                  reference.conv2d(x[a:c], w, b, **kwargs))


def test_reference_rounds_once_to_the_input_dtype(rng):
    """float16 in, float16 out: the float64 sum rounded once, as the direct oracle does."""
    x, w, _ = random_arrays(rng, (1, 8, 6, 6), (3, 8, 3, 3), 3, np.float16, bias=False)
    y = reference.conv2d(x, w)
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, reference.conv2d_direct(x, w))


@pytest.mark.parametrize("bad, error", [
    (dict(R=0), ValueError), (dict(R=1.5), TypeError), (dict(padding="same"), ValueError),
    (dict(layout="CHWN"), ValueError), (dict(stride=0), ValueError), (dict(R=9), ValueError),
])
def test_image_to_window_rejects_bad_arguments(bad, error):
    kwargs = dict(R=2, stride=1, padding=0, dilation=1, layout="NCHW") | bad
    with pytest.raises(error):
        reference.image_to_window(np.zeros((1, 1, 4, 4)), kwargs.pop("R"), **kwargs)


def test_filter_to_window_rejects_bad_rank():
    with pytest.raises(ValueError, match="4-D weight"):
        reference.filter_to_window(np.zeros((2, 3, 3)))
