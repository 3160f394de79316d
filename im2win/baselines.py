"""The im2col+GEMM baseline: the classic lowering every benchmark compares against.

The whole batch is padded and unrolled into a ((C/G)*R*S) x (N*P*Q) matrix per group (its
transpose for NHWC), then multiplied by the filter with one batched GEMM (BLAS for NumPy, cuBLAS for CuPy). Its extra
memory is that matrix: the cost the im2win window exists to avoid.
"""

from __future__ import annotations

import sys

import numpy as np

from im2win.cpu import accumulator
from im2win.problem import make_problem


def im2col_gemm(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1, layout="NCHW"):
    """Convolve by im2col of the whole batch and one GEMM; arguments as `im2win.conv2d`.

    NumPy float16 is lowered and multiplied in float32 (NumPy has no float16 BLAS); CuPy keeps
    the input dtype and lets cuBLAS accumulate in float32.
    """
    cupy = sys.modules.get("cupy")
    xp = cupy if cupy is not None and isinstance(x, cupy.ndarray) else np
    prob = make_problem(x, w, bias, stride=stride, padding=padding, dilation=dilation,
                        groups=groups, layout=layout)
    N, G, Cg, Kg, P, Q, R, S = prob.N, prob.G, prob.Cg, prob.Kg, prob.P, prob.Q, prob.R, prob.S
    work = accumulator(prob.dtype) if xp is np else prob.dtype
    # NCHW: one row of the matrix per (c, r, s), a contiguous (N, P, Q) copy per tap, as
    # Caffe's im2col; NHWC: one row per output pixel, (r, s, c) along it.
    if layout == "NCHW":
        x_pad = xp.pad(x, ((0, 0), (0, 0), (prob.pt, prob.pb), (prob.pl, prob.pr)))
        cols = xp.empty((G, Cg, R, S, N, P, Q), work)
    else:
        x_pad = xp.pad(x, ((0, 0), (prob.pt, prob.pb), (prob.pl, prob.pr), (0, 0)))
        cols = xp.empty((G, N, P, Q, R, S, Cg), work)
    for r in range(R):
        for s in range(S):
            rows = slice(r * prob.dh, r * prob.dh + prob.sh * (P - 1) + 1, prob.sh)
            columns = slice(s * prob.dw, s * prob.dw + prob.sw * (Q - 1) + 1, prob.sw)
            if layout == "NCHW":
                tap = x_pad[:, :, rows, columns].reshape(N, G, Cg, P, Q)
                cols[:, :, r, s] = tap.transpose(1, 2, 0, 3, 4)
            else:
                tap = x_pad[:, rows, columns, :].reshape(N, P, Q, G, Cg)
                cols[:, :, :, :, r, s, :] = tap.transpose(3, 0, 1, 2, 4)
    if layout == "NCHW":
        w_mat = w.reshape(G, Kg, Cg * R * S).astype(work)
        y = xp.matmul(w_mat, cols.reshape(G, Cg * R * S, N * P * Q))          # (G, Kg, NPQ)
        if bias is not None:
            y += bias.astype(work).reshape(G, Kg, 1)
        y = y.reshape(G, Kg, N, P, Q).transpose(2, 0, 1, 3, 4).reshape(N, G * Kg, P, Q)
    else:
        w_mat = w.reshape(G, Kg, R * S * Cg).astype(work)
        y = xp.matmul(cols.reshape(G, N * P * Q, -1), w_mat.transpose(0, 2, 1))  # (G, NPQ, Kg)
        if bias is not None:
            y += bias.astype(work).reshape(G, 1, Kg)
        y = y.reshape(G, N, P, Q, Kg).transpose(1, 2, 3, 0, 4).reshape(N, P, Q, G * Kg)
    return xp.ascontiguousarray(y, dtype=prob.dtype)
