"""A direct convolution with no window tensor: an independent test oracle for the reference.

It sums one strided slice of the padded input per filter tap (r, s), straight from the formula
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
    for r in range(prob.R):
        for s in range(prob.S):
            top, left = r * prob.dh, s * prob.dw
            tap = xp[..., top:top + prob.sh * (P - 1) + 1:prob.sh,
                     left:left + prob.sw * (Q - 1) + 1:prob.sw]                # (N, G, Cg, P, Q)
            y += np.einsum("ngcpq,gkc->ngkpq", tap, wg[..., r, s])
    y = y.reshape(N, G * Kg, P, Q)
    if bias is not None:
        y += bias.astype(np.float64)[:, None, None]
    if layout == "NHWC":
        y = y.transpose(0, 2, 3, 1)
    return y.astype(prob.dtype)
