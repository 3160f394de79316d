"""A direct convolution and its two gradients with no window tensor: independent test oracles
for the reference.

Each sums one strided slice of the padded input per filter tap (r, s), straight from the formula
in ``spec/im2win.md``, in float64, so that it shares no layout code with `image_to_window`.
"""

from __future__ import annotations

import numpy as np

from im2win import problem as _problem


def conv2d_direct(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1,
                  layout="NCHW"):
    """Convolve x with w tap by tap, in float64, rounding once to x's dtype.

    Args and returns as `im2win.reference.conv2d`.
    """
    x, w = np.asarray(x), np.asarray(w)
    bias = None if bias is None else np.asarray(bias)
    prob = _problem.make_problem(x, w, bias, stride=stride, padding=padding,
                                 dilation=dilation, groups=groups, layout=layout)
    if layout == "NHWC":
        x, w = x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2)
    N, G, Cg, Kg, P, Q = prob.N, prob.G, prob.Cg, prob.Kg, prob.P, prob.Q
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (prob.pt, prob.pb), (prob.pl, prob.pr)))
    xp = xp.reshape(N, G, Cg, prob.Hp, prob.Wp)
    wg = w.astype(np.float64).reshape(G, Kg, Cg, prob.R, prob.S)
    y = np.zeros((N, G, Kg, P, Q))
    for r, s, tap in _taps(prob, xp):
        y += np.einsum("ngcpq,gkc->ngkpq", xp[tap], wg[..., r, s])          # (N, G, Kg, P, Q)
    y = y.reshape(N, G * Kg, P, Q)
    if bias is not None:
        y += bias.astype(np.float64)[:, None, None]
    if layout == "NHWC":
        y = y.transpose(0, 2, 3, 1)
    return y.astype(prob.dtype)


def _taps(prob, a):
    """For every tap (r, s), the strided slice (..., P, Q) of the padded a (..., Hp, Wp) that
    meets it."""
    for r in range(prob.R):
        for s in range(prob.S):
            top, left = r * prob.dh, s * prob.dw
            yield r, s, (..., slice(top, top + prob.sh * (prob.P - 1) + 1, prob.sh),
                         slice(left, left + prob.sw * (prob.Q - 1) + 1, prob.sw))


def conv2d_backward_data_direct(dy, w, x_shape, *, stride=1, padding=0, dilation=1, groups=1,
                                layout="NCHW"):
    """The x-gradient tap by tap (dy times one filter tap, added onto one strided slice of the
    padded input), in float64: an oracle for `conv2d_backward_data` with no window code."""
    dy, w = np.asarray(dy), np.asarray(w)
    prob = _problem.make_backward_data_problem(dy, w, x_shape, stride=stride, padding=padding,
                                               dilation=dilation, groups=groups, layout=layout)
    if layout == "NHWC":
        dy, w = dy.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2)
    N, G, Cg, Kg = prob.N, prob.G, prob.Cg, prob.Kg
    dyg = dy.astype(np.float64).reshape(N, G, Kg, prob.P, prob.Q)
    wg = w.astype(np.float64).reshape(G, Kg, Cg, prob.R, prob.S)
    dxp = np.zeros((N, G, Cg, prob.Hp, prob.Wp))
    for r, s, tap in _taps(prob, dxp):
        dxp[tap] += np.einsum("ngkpq,gkc->ngcpq", dyg, wg[..., r, s])
    dx = dxp[..., prob.pt:prob.pt + prob.H, prob.pl:prob.pl + prob.W].reshape(
        N, G * Cg, prob.H, prob.W)
    return (dx if layout == "NCHW" else dx.transpose(0, 2, 3, 1)).astype(prob.dtype)


def conv2d_backward_filter_direct(x, dy, w_shape, *, stride=1, padding=0, dilation=1,
                                  groups=1, layout="NCHW"):
    """The w-gradient tap by tap (one strided slice of the padded input against dy), in
    float64: an oracle for `conv2d_backward_filter` with no window code."""
    x, dy = np.asarray(x), np.asarray(dy)
    prob = _problem.make_backward_filter_problem(x, dy, w_shape, stride=stride,
                                                 padding=padding, dilation=dilation,
                                                 groups=groups, layout=layout)
    if layout == "NHWC":
        x, dy = x.transpose(0, 3, 1, 2), dy.transpose(0, 3, 1, 2)
    N, G, Cg, Kg = prob.N, prob.G, prob.Cg, prob.Kg
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (prob.pt, prob.pb), (prob.pl, prob.pr)))
    xp = xp.reshape(N, G, Cg, prob.Hp, prob.Wp)
    dyg = dy.astype(np.float64).reshape(N, G, Kg, prob.P, prob.Q)
    dw = np.zeros((G, Kg, Cg, prob.R, prob.S))
    for r, s, tap in _taps(prob, xp):
        dw[..., r, s] = np.einsum("ngcpq,ngkpq->gkc", xp[tap], dyg)
    dw = dw.reshape(G * Kg, Cg, prob.R, prob.S)
    return (dw if layout == "NCHW" else dw.transpose(0, 2, 3, 1)).astype(prob.dtype)
