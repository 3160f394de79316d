"""The CPU path: the window tensor contracted with BLAS, a block of output rows at a time.

For each image and each block of output rows, build that block's window tensor (the reference
`image_to_window` on the few input rows it needs), gather each output pixel's runs into a
matrix, and multiply it by the filter with one batched ``matmul`` (float32 accumulation for
float16). Extra memory is bounded by the block, never the whole batch; blocks never span two images, so an image's result does not depend on
which other images share the call (``conv2d(x)[a:b]`` equals ``conv2d(x[a:b])`` bit for bit).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from im2win.problem import Problem
from im2win.reference import image_to_window

# Bytes of the gathered runs matrix per block: the fastest of 1, 4, 16 and 64 MiB on the layers
# measured, with extra memory a few blocks (docs/performance.md, "Block size").
BLOCK_BYTES = 16 << 20


def accumulator(dtype) -> np.dtype:
    """float32 accumulation for float16 and float32, float64 for float64."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def rows_per_block(prob: Problem) -> int:
    """Output rows of one image per block, so that the gathered matrix fits in BLOCK_BYTES."""
    row_bytes = prob.Q * prob.C * prob.R * prob.S * accumulator(prob.dtype).itemsize
    return max(1, min(prob.P, BLOCK_BYTES // max(row_bytes, 1)))


def filter_matrix(prob: Problem, w: np.ndarray) -> np.ndarray:
    """w as (G, K/G, (C/G)*R*S) in its own order, a view unless a cast is needed."""
    return w.reshape(prob.G, prob.Kg, prob.reduction).astype(accumulator(prob.dtype), copy=False)


def window_block(prob: Problem, x_image: np.ndarray, p0: int, p1: int) -> np.ndarray:
    """The window tensor of output rows p0 <= p < p1 of one image (a 1-image batch)."""
    first = p0 * prob.sh - prob.pt                   # input rows first..last (unpadded coords)
    last = (p1 - 1) * prob.sh + prob.dh * (prob.R - 1) - prob.pt
    lo, hi = max(first, 0), min(last, prob.H - 1)    # the rows inside x, if any
    if lo > hi:                                      # the block lies wholly in the padding
        lo, hi, top, bottom = 0, -1, last - first + 1, 0
    else:
        top, bottom = lo - first, last - hi
    pad = [(0, 0)] * 4
    if prob.layout == "NCHW":
        x_rows, pad[2] = x_image[:, :, lo:hi + 1, :], (top, bottom)
    else:
        x_rows, pad[1] = x_image[:, lo:hi + 1, :, :], (top, bottom)
    # The vertical padding goes in first, so a block lying wholly in the padding still works.
    return image_to_window(np.pad(x_rows, pad), prob.R, stride=prob.sh, dilation=prob.dh,
                           padding=((0, 0), (prob.pl, prob.pr)), layout=prob.layout)


def gather_runs(prob: Problem, x_win: np.ndarray) -> np.ndarray:
    """Gather each output pixel's window runs into a matrix for one GEMM with the filter.

    Returns (G, (C/G)*R*S, pixels) for NCHW, so that the GEMM yields (K/G, pixels) rows of y
    and the copy runs along output columns; (G, pixels, R*S*(C/G)) for NHWC, whose runs end
    in contiguous channels. The reduction is in w's own order, so w needs no reordered copy.
    """
    G, Cg, R, S, Q = prob.G, prob.Cg, prob.R, prob.S, prob.Q
    span = prob.dw * (S - 1) + 1
    acc = accumulator(prob.dtype)
    if prob.layout == "NCHW":
        rows = x_win.shape[2]
        cols = x_win.reshape(G, Cg, rows, prob.Wp, R)
        # Window columns m = q*sw + s*dw: (G, Cg, rows, Q, R, S), a view.
        runs = sliding_window_view(cols, span, axis=3)[:, :, :, ::prob.sw, :, ::prob.dw]
        out = np.empty((G, Cg, R, S, rows, Q), acc)
        out[...] = runs.transpose(0, 1, 4, 5, 2, 3)
        return out.reshape(G, prob.reduction, rows * Q)
    rows = x_win.shape[1]
    cols = x_win.reshape(rows, prob.Wp, R, G, Cg)
    runs = sliding_window_view(cols, span, axis=1)[:, ::prob.sw, :, :, :, ::prob.dw]
    out = np.empty((G, rows, Q, R, S, Cg), acc)                 # runs: (rows, Q, R, G, Cg, S)
    out[...] = runs.transpose(3, 0, 1, 2, 5, 4)
    return out.reshape(G, rows * Q, prob.reduction)


def conv2d(prob: Problem, x: np.ndarray, w: np.ndarray, bias, y: np.ndarray) -> np.ndarray:
    """Write the convolution of x with w (+ bias) into y, block by block; return y.

    Args:
        prob: the checked problem.
        x, w, bias: NumPy arrays of `prob`'s shapes and dtype.
        y: output, ``prob.y_shape``, written entirely.
    """
    w_mat = filter_matrix(prob, w)                                 # (G, K/G, reduction)
    b = None if bias is None else bias.astype(w_mat.dtype)
    block = rows_per_block(prob)
    for n in range(prob.N):
        for p0 in range(0, prob.P, block):
            p1 = min(prob.P, p0 + block)
            runs = gather_runs(prob, window_block(prob, x[n:n + 1], p0, p1))
            if prob.layout == "NCHW":
                y_block = np.matmul(w_mat, runs)                     # (G, K/G, pixels)
                y_block = y_block.reshape(prob.K, p1 - p0, prob.Q)
                if b is not None:
                    y_block += b[:, None, None]
                y[n, :, p0:p1, :] = y_block
            else:
                y_block = np.matmul(runs, w_mat.transpose(0, 2, 1))  # (G, pixels, K/G)
                y_block = y_block.transpose(1, 0, 2).reshape(p1 - p0, prob.Q, prob.K)
                if b is not None:
                    y_block += b
                y[n, p0:p1, :, :] = y_block
    return y
