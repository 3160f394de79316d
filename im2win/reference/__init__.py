"""The exact NumPy reference: the window layout and the convolution it computes.

This module is the specification in code (``spec/im2win.md``): short and readable rather than
fast. Every other path of the library is tested against it. `conv2d_direct` and the two
`*_direct` gradients are independent formulations (no windows) kept only as test oracles.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from im2win import problem as _problem
from im2win.reference.direct import (conv2d_backward_data_direct, conv2d_backward_filter_direct,
                                     conv2d_direct)

__all__ = ["image_to_window", "window_to_image", "filter_to_window", "conv2d",
           "conv2d_backward_data", "conv2d_backward_filter", "conv2d_direct",
           "conv2d_backward_data_direct", "conv2d_backward_filter_direct"]


def image_to_window(x, R, *, stride=1, padding=0, dilation=1, layout="NCHW"):
    """Store, for every output row p, the R input rows under it interleaved column by column.

    NCHW: ``x_win[n, c, p, m*R + r] = xp[n, c, p*sh + r*dh, m]``;
    NHWC: ``x_win[n, p, m*R + r, c] = xp[n, p*sh + r*dh, m, c]``, where xp is x zero-padded to
    (Hp, Wp). Only the vertical stride sh and dilation dh matter here.

    Args:
        x: (N, C, H, W) for NCHW or (N, H, W, C) for NHWC.
        R: filter rows.
        stride, dilation: int or pair (only the vertical entry is used).
        padding: as in `conv2d`, except "same" (which needs S).
        layout: "NCHW" or "NHWC".

    Returns:
        x_win: (N, C, P, Wp*R) for NCHW or (N, P, Wp*R, C) for NHWC, x's dtype, padding zeros
        materialised.

    Raises:
        TypeError, ValueError: as `conv2d`.

    Example:
        >>> x = np.arange(12.0).reshape(1, 1, 4, 3)
        >>> image_to_window(x, 2, stride=2)[0, 0]
        array([[ 0.,  3.,  1.,  4.,  2.,  5.],
               [ 6.,  9.,  7., 10.,  8., 11.]])
    """
    x = np.asarray(x)
    layout = _problem.check_layout(layout)
    R = _problem.check_int("R", R)
    if R <= 0:
        raise ValueError(f"R must be positive, got R={R}")
    pad = _problem.check_padding_form(padding)
    if pad == "same":
        raise ValueError("image_to_window does not accept padding='same': it needs S")
    pt, pb, pl, pr = pad
    sh, _ = _problem.check_stride(stride)
    dh, _ = _problem.check_dilation(dilation)
    _, _, H, W = _problem.check_input_shape(x.shape, layout)
    _problem.check_dtype("input", x.dtype)
    _problem.check_fits(H + pt + pb, W + pl + pr, R, 1, dh, 1)

    if layout == "NCHW":
        xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
        Hp = xp.shape[2]
    else:
        xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
        Hp = xp.shape[1]
    P = (Hp - dh * (R - 1) - 1) // sh + 1
    # rows[r] holds input row p*sh + r*dh for every output row p.
    rows = [slice(r * dh, r * dh + sh * (P - 1) + 1, sh) for r in range(R)]
    if layout == "NCHW":
        N, C, _, Wp = xp.shape
        x_win = np.stack([xp[:, :, row, :] for row in rows], axis=-1)   # (N, C, P, Wp, R)
        return x_win.reshape(N, C, P, Wp * R)
    N, _, Wp, C = xp.shape
    x_win = np.stack([xp[:, row, :, :] for row in rows], axis=3)         # (N, P, Wp, R, C)
    return x_win.reshape(N, P, Wp * R, C)


def filter_to_window(w, *, layout="NCHW"):
    """Put the filter in window order: the R x S plane transposed, r fastest.

    Args:
        w: (K, C/G, R, S) for NCHW or (K, R, S, C/G) for NHWC.
        layout: "NCHW" or "NHWC".

    Returns:
        w_win: (K, C/G, S*R) with ``w_win[k, c, s*R + r] = w[k, c, r, s]`` for NCHW, or
        (K, S*R, C/G) with ``w_win[k, s*R + r, c] = w[k, r, s, c]`` for NHWC.

    Raises:
        TypeError, ValueError: bad layout, rank or dtype.

    Example:
        >>> filter_to_window(np.array([[[[1.0, 2.0], [3.0, 4.0]]]]))
        array([[[1., 3., 2., 4.]]])
    """
    w = np.asarray(w)
    layout = _problem.check_layout(layout)
    if w.ndim != 4:
        raise ValueError(f"expected 4-D weight for layout {layout!r}, got weight of shape "
                         f"{w.shape}")
    _problem.check_dtype("weight", w.dtype)
    if layout == "NCHW":
        K, Cg, R, S = w.shape
        return w.transpose(0, 1, 3, 2).reshape(K, Cg, S * R)
    K, R, S, Cg = w.shape
    return w.transpose(0, 2, 1, 3).reshape(K, S * R, Cg)


def conv2d(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1, layout="NCHW"):
    """Convolve (cross-correlate) x with w on windows, accumulating in float64.

    ``y[n,k,p,q] = bias[k] + sum_{c,r,s} xp[n, g*C/G + c, p*sh + r*dh, q*sw + s*dw] * w[k,c,r,s]``,
    computed as the spec's "convolution on windows": output column q reads window columns
    ``m = q*sw + s*dw`` of ``image_to_window(x)`` against ``filter_to_window(w)``. The sum is
    exact to float64 and rounded once to x's dtype.

    Args:
        x: (N, C, H, W) for NCHW or (N, H, W, C) for NHWC.
        w: (K, C/G, R, S) for NCHW or (K, R, S, C/G) for NHWC.
        bias: None or (K,).
        stride, padding, dilation, groups, layout: as in `im2win.conv2d`.

    Returns:
        y: (N, K, P, Q) for NCHW or (N, P, Q, K) for NHWC, x's dtype.

    Raises:
        TypeError, ValueError: as `im2win.conv2d`.

    Example:
        >>> conv2d(np.ones((1, 1, 3, 3)), np.ones((1, 1, 2, 2)))[0, 0]
        array([[4., 4.],
               [4., 4.]])
    """
    x, w = np.asarray(x), np.asarray(w)
    bias = None if bias is None else np.asarray(bias)
    prob = _problem.make_problem(x, w, bias, stride=stride, padding=padding, dilation=dilation,
                               groups=groups, layout=layout)
    N, G, Cg, Kg, P, Q, R, S = prob.N, prob.G, prob.Cg, prob.Kg, prob.P, prob.Q, prob.R, prob.S
    x_win = image_to_window(x.astype(np.float64), R, stride=prob.sh, dilation=prob.dh,
                            padding=((prob.pt, prob.pb), (prob.pl, prob.pr)), layout=layout)
    w_win = filter_to_window(w.astype(np.float64), layout=layout)
    # Window column under output column q and filter column s.
    m = np.arange(Q)[:, None] * prob.sw + np.arange(S)[None, :] * prob.dw            # (Q, S)
    # Image by image, so that an image's result never depends on the rest of the batch.
    if layout == "NCHW":
        runs = x_win.reshape(N, G, Cg, P, prob.Wp, R)[:, :, :, :, m, :]          # (N,G,Cg,P,Q,S,R)
        runs = runs.reshape(N, G, Cg, P, Q, S * R)
        w_win = w_win.reshape(G, Kg, Cg, S * R)
        y = np.empty((N, G * Kg, P, Q))
        for n in range(N):
            y[n] = np.einsum("gcpqt,gkct->gkpq", runs[n], w_win,
                             optimize=True).reshape(G * Kg, P, Q)
        if bias is not None:
            y += bias.astype(np.float64)[:, None, None]
    else:
        runs = x_win.reshape(N, P, prob.Wp, R, G, Cg)[:, :, m]                   # (N,P,Q,S,R,G,Cg)
        runs = runs.reshape(N, P, Q, S * R, G, Cg)
        w_win = w_win.reshape(G, Kg, S * R, Cg)
        y = np.empty((N, P, Q, G * Kg))
        for n in range(N):
            y[n] = np.einsum("pqtgc,gktc->pqgk", runs[n], w_win,
                             optimize=True).reshape(P, Q, G * Kg)
        if bias is not None:
            y += bias.astype(np.float64)
    return y.astype(prob.dtype)


def window_to_image(x_win, H, W, R, *, stride=1, padding=0, dilation=1, layout="NCHW"):
    """The adjoint of `image_to_window`: add every window entry back onto the input pixel it
    was copied from, and drop the padding.

    NCHW: ``x[n, c, h, m - pl] = sum over (p, r) with p*sh + r*dh - pt == h of
    x_win[n, c, p, m*R + r]`` (NHWC alike), so ``<image_to_window(x), v> == <x,
    window_to_image(v)>`` for every x and v.

    Args:
        x_win: (N, C, P, Wp*R) for NCHW or (N, P, Wp*R, C) for NHWC.
        H, W: the input's height and width.
        R, stride, padding, dilation, layout: as `image_to_window`.

    Returns:
        x: (N, C, H, W) or (N, H, W, C), in float64.
    """
    x_win = np.asarray(x_win, np.float64)
    layout = _problem.check_layout(layout)
    pt, pb, pl, pr = _problem.check_padding_form(padding)
    sh, _ = _problem.check_stride(stride)
    dh, _ = _problem.check_dilation(dilation)
    if layout == "NHWC":
        x_win = x_win.transpose(0, 3, 1, 2)
    N, C, P, WpR = x_win.shape
    Wp = WpR // R
    x_win = x_win.reshape(N, C, P, Wp, R)
    xp = np.zeros((N, C, H + pt + pb, Wp))
    for r in range(R):                      # for one r, the rows p*sh + r*dh are distinct
        xp[:, :, r * dh:r * dh + sh * (P - 1) + 1:sh, :] += x_win[..., r]
    x = xp[:, :, pt:pt + H, pl:pl + W]
    return x if layout == "NCHW" else x.transpose(0, 2, 3, 1)


def _window_runs(x_win, prob):
    """The window runs of each output pixel, NCHW-lettered: (N, G, C/G, P, Q, S*R), t = s*R + r,
    from x_win (N, C, P, Wp*R)."""
    m = np.arange(prob.Q)[:, None] * prob.sw + np.arange(prob.S)[None, :] * prob.dw   # (Q, S)
    runs = x_win.reshape(prob.N, prob.G, prob.Cg, prob.P, prob.Wp, prob.R)[:, :, :, :, m, :]
    return runs.reshape(prob.N, prob.G, prob.Cg, prob.P, prob.Q, prob.S * prob.R)


def _nchw(a, layout):
    """An NHWC-ordered array (N, H, W, C) as NCHW (N, C, H, W); NCHW ones as they are."""
    return a if layout == "NCHW" else a.transpose(0, 3, 1, 2)


def conv2d_backward_data(dy, w, x_shape, *, stride=1, padding=0, dilation=1, groups=1,
                         layout="NCHW"):
    """The gradient of `conv2d` with respect to x, in float64, rounded once to dy's dtype.

    ``dx[n, g*C/G + c, h, v] = sum over (k, p, q, r, s) with p*sh + r*dh - pt == h and
    q*sw + s*dw - pl == v of dy[n, g*K/G + k, p, q] * w[g*K/G + k, c, r, s]``: in window words,
    each output pixel's gradient spread along its window run (``dy`` times ``filter_to_window
    (w)``), added up in the window tensor, then sent back to the image by `window_to_image`.
    NHWC arrays are read and written in their layout; the sums are the NCHW ones.

    Args:
        dy: the output's gradient, (N, K, P, Q) for NCHW or (N, P, Q, K) for NHWC.
        w: (K, C/G, R, S) for NCHW or (K, R, S, C/G) for NHWC.
        x_shape: x's shape, (N, C, H, W) or (N, H, W, C).
        stride, padding, dilation, groups, layout: as `conv2d`.

    Returns:
        dx: of `x_shape`, dy's dtype.
    """
    dy, w = np.asarray(dy), np.asarray(w)
    prob = _problem.make_backward_data_problem(dy, w, x_shape, stride=stride, padding=padding,
                                               dilation=dilation, groups=groups, layout=layout)
    N, G, Cg, Kg, P, Q, R, S = prob.N, prob.G, prob.Cg, prob.Kg, prob.P, prob.Q, prob.R, prob.S
    dy = _nchw(dy, layout).astype(np.float64).reshape(N, G, Kg, P, Q)
    w_win = filter_to_window(_nchw(w, layout).astype(np.float64)).reshape(G, Kg, Cg, S * R)
    m = np.arange(Q) * prob.sw
    dx = np.empty((N, G * Cg, prob.H, prob.W))
    for n in range(N):                      # image by image: one image's window at a time
        runs = np.einsum("gkpq,gkct->gcpqt", dy[n], w_win,
                         optimize=True).reshape(G, Cg, P, Q, S, R)
        dx_win = np.zeros((G, Cg, P, prob.Wp, R))
        for s in range(S):                  # for one s, the columns q*sw + s*dw are distinct
            dx_win[:, :, :, m + s * prob.dw, :] += runs[:, :, :, :, s, :]
        dx[n] = window_to_image(dx_win.reshape(1, G * Cg, P, prob.Wp * R), prob.H, prob.W, R,
                                stride=prob.sh, dilation=prob.dh,
                                padding=((prob.pt, prob.pb), (prob.pl, prob.pr)))[0]
    return (dx if layout == "NCHW" else dx.transpose(0, 2, 3, 1)).astype(prob.dtype)


def conv2d_backward_filter(x, dy, w_shape, *, stride=1, padding=0, dilation=1, groups=1,
                           layout="NCHW"):
    """The gradient of `conv2d` with respect to w, in float64, rounded once to x's dtype.

    ``dw[g*K/G + k, c, r, s] = sum_{n, p, q} dy[n, g*K/G + k, p, q] * xp[n, g*C/G + c,
    p*sh + r*dh, q*sw + s*dw]``: in window words, a reduction over pixels of each output
    pixel's gradient times its window run, in window order (``w_win``), put back in w's order.
    The bias gradient is dy summed over N, P and Q.

    Args:
        x: (N, C, H, W) for NCHW or (N, H, W, C) for NHWC.
        dy: the output's gradient, (N, K, P, Q) or (N, P, Q, K).
        w_shape: w's shape, (K, C/G, R, S) or (K, R, S, C/G).
        stride, padding, dilation, groups, layout: as `conv2d`.

    Returns:
        dw: of `w_shape`, x's dtype.
    """
    x, dy = np.asarray(x), np.asarray(dy)
    prob = _problem.make_backward_filter_problem(x, dy, w_shape, stride=stride,
                                                 padding=padding, dilation=dilation,
                                                 groups=groups, layout=layout)
    N, G, Cg, Kg, P, Q, R, S = prob.N, prob.G, prob.Cg, prob.Kg, prob.P, prob.Q, prob.R, prob.S
    dy = _nchw(dy, layout).astype(np.float64).reshape(N, G, Kg, P, Q)
    dw_win = np.zeros((G, Kg, Cg, S * R))
    for n in range(N):                      # image by image: one image's window at a time
        x_win = image_to_window(_nchw(x[n:n + 1], layout).astype(np.float64), R,
                                stride=prob.sh, dilation=prob.dh,
                                padding=((prob.pt, prob.pb), (prob.pl, prob.pr)))
        runs = _window_runs(x_win, dataclasses.replace(prob, N=1))[0]
        dw_win += np.einsum("gkpq,gcpqt->gkct", dy[n], runs, optimize=True)
    dw = dw_win.reshape(G * Kg, Cg, S, R).transpose(0, 1, 3, 2)        # window order undone
    return (dw if layout == "NCHW" else dw.transpose(0, 2, 3, 1)).astype(prob.dtype)
