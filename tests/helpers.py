"""Helpers shared by the tests: layout conversion and random problems."""

import numpy as np
from hypothesis import strategies as st

from im2win.problem import same_padding


def to_layout(layout, x, w):
    """NCHW-lettered x (N, C, H, W) and w (K, C/G, R, S) as arrays of `layout`."""
    if layout == "NCHW":
        return x, w
    return x.transpose(0, 2, 3, 1), w.transpose(0, 2, 3, 1)


def from_layout(layout, y):
    """y of `layout` as NCHW (N, K, P, Q)."""
    return y if layout == "NCHW" else y.transpose(0, 3, 1, 2)


def random_arrays(rng, x_shape, w_shape, K, dtype=np.float64, bias=True):
    """Uniform x, w (and bias) in [-1, 1), rounded to `dtype`."""
    x = rng.uniform(-1, 1, x_shape).astype(dtype)
    w = rng.uniform(-1, 1, w_shape).astype(dtype)
    b = rng.uniform(-1, 1, K).astype(dtype) if bias else None
    return x, w, b


@st.composite
def problems(draw, max_n=3):
    """A random valid problem, NCHW-lettered: (x_shape, w_shape, kwargs), every padding form."""
    G = draw(st.integers(1, 3))
    Cg, Kg = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    R, S = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    form = draw(st.sampled_from(["explicit", "int", "pair", "valid", "same"]))
    if form == "same":
        sh = sw = 1
        padding, (pt, pb, pl, pr) = "same", same_padding(R, S, dh, dw)
    elif form == "valid":
        padding, (pt, pb, pl, pr) = "valid", (0, 0, 0, 0)
    elif form == "int":
        padding = pt = pb = pl = pr = draw(st.integers(0, 4))
    elif form == "pair":
        padding = (draw(st.integers(0, 4)), draw(st.integers(0, 4)))
        pt = pb = padding[0]
        pl = pr = padding[1]
    else:
        pt, pb, pl, pr = (draw(st.integers(0, 4)) for _ in range(4))
        padding = ((pt, pb), (pl, pr))
    H = draw(st.integers(max(1, dh * (R - 1) + 1 - pt - pb), 9))
    W = draw(st.integers(max(1, dw * (S - 1) + 1 - pl - pr), 9))
    N = draw(st.integers(0, max_n))
    kwargs = dict(stride=(sh, sw), dilation=(dh, dw), groups=G, padding=padding)
    return (N, G * Cg, H, W), (G * Kg, Cg, R, S), kwargs


def contiguous_strides(prob):
    """Element strides (NCHW-lettered) of a C-contiguous x of the problem's layout."""
    N, C, H, W = prob.N, prob.C, prob.H, prob.W
    return (C * H * W, H * W, W, 1) if prob.layout == "NCHW" else (H * W * C, 1, W * C, C)
