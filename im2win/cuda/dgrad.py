"""Backward data through window gradients, for one group of few channels in NHWC.

The phases of `im2win.gradients.backward_data` are forward convolutions whose outputs have C
channels: with C = 3 (a network's first layer) a Tensor-Core tile of 64 or more output channels
does 3 channels' work. Here the same gradient goes the way the reference computes it
(`im2win.reference.conv2d_backward_data`): each output pixel's gradient times the filter is
its window's gradient, g[n, p, q, (r, s, c)] = sum over k of dy[n, p, q, k] * w[k, r, s, c],
one GEMM of dy (N*P*Q x K) with w (K x R*S*C) by cuBLAS, in float32 (float64 for float64)
and without TF32; then window.cu's `window_to_image` adds every window entry back onto the
pixel of x it belongs to, the taps of an element in a fixed order (r, then s), and rounds once.

Memory: g for a chunk of images at a time, at most WORKSPACE bytes (one image's g when that
alone is more). No atomics: the same bits every run.
"""

from __future__ import annotations

import numpy as np

from im2win.cuda.plan import CUDA_TYPES
from im2win.problem import Problem

WORKSPACE = 256 << 20       # bytes of window gradients a chunk of images holds (at least one)
FEW_CHANNELS = 8            # C below this: the phases' outputs fill under 8 of a tile's columns
PADDING_WASTE = 1.3         # float32 stride 1: H*W / (P*Q) from which window gradients pay


def pays(prob: Problem) -> bool:
    """Whether backward data goes through window gradients: NHWC, one group, and either
    C < FEW_CHANNELS (a network's first layers: the phases' Tensor-Core tiles waste most of
    their width) at a stride or in float32/float64, or float32 at stride 1 where the phase's
    full padding makes it compute at least PADDING_WASTE times the useful work (H*W outputs
    of R*S taps each for P*Q pixels' worth).
    On the H200 (float16, batch 128) cv1 went from 2.67 to 1.20 ms, cv3 from 2.40 to 1.83;
    cv7 (stride 1, one phase) 1.73 against 1.81, so 16-bit types at stride 1 keep the phase;
    float32 cv7 15.9 -> 1.76 (docs/hopper.md, step 7). float32 phases on im2win_ffma.cu
    (2026-12-02) ran at the forward's rate over H*W/(P*Q) times the work: cv12 (1.96) 14.3
    TFLOPS of useful work against 27 forward, cv6 and cv5 (1.44) 20.6 and 19.3, while cv10
    (1.16) kept 32.9; through window gradients cv12 ran at 30.2, cv6 37.1, cv5 30.0 and cv11
    (1.36) 28.0 against 26.7 (python -m im2win --op backward_data, batch 128)."""
    if prob.layout != "NHWC" or prob.G != 1 or prob.dtype.name not in CUDA_TYPES:
        return False
    if prob.C < FEW_CHANNELS:
        return prob.sh * prob.sw > 1 or prob.dtype.name in ("float32", "float64")
    return prob.dtype.name == "float32" and prob.sh == prob.sw == 1 and \
        prob.H * prob.W >= PADDING_WASTE * prob.P * prob.Q


def chunk(prob: Problem, workspace: int = WORKSPACE) -> int:
    """Images whose window gradients one pass holds."""
    acc = 8 if prob.dtype.name == "float64" else 4
    per_image = prob.P * prob.Q * prob.R * prob.S * prob.C * acc
    return max(1, min(prob.N, workspace // max(per_image, 1)))


def specializations() -> set:
    return {("window", f"window_to_image<{t}, {a}>") for t, a in CUDA_TYPES.values()}


class Runner:
    """The problem made ready on the current device, immutable once built: the cuBLAS types
    and scalars, the chunk, the kernel and its arguments past the pointers; a call launches
    one GEMM and one window_to_image per chunk. dy and w: C-contiguous, dx contiguous."""

    def __init__(self, prob: Problem, workspace: int = WORKSPACE):
        import cupy
        from cupy.cuda import cublas

        from im2win.cuda import launch
        self.prob, self.cublas = prob, cublas
        self.data, self.compute, scale = launch._cublas_types(prob.dtype.name)
        wide = prob.dtype.name == "float64"
        self.acc = np.float64 if wide else np.float32
        self.acc_type = cupy.cuda.runtime.CUDA_R_64F if wide else cupy.cuda.runtime.CUDA_R_32F
        self.scalars = np.array([1, 0], scale)          # alpha, beta: never written after
        self.chunk = chunk(prob, workspace)
        self.rsc = prob.R * prob.S * prob.C
        T, Acc = CUDA_TYPES[prob.dtype.name]
        self.function = launch.kernel("window", f"window_to_image<{T}, {Acc}>")
        tr = prob.sh // np.gcd(prob.sh, prob.dh)
        ts = prob.sw // np.gcd(prob.sw, prob.dw)
        self.ints = tuple(np.int32(v) for v in (
            prob.H, prob.W, prob.C, prob.P, prob.Q, prob.R, prob.S, prob.sh, prob.sw, prob.dh,
            prob.dw, prob.pt, prob.pl, tr, ts))

    def __call__(self, dy, w, dx) -> None:
        import cupy

        from im2win.cuda import launch
        prob, cublas = self.prob, self.cublas
        scratch = launch.Scratch()
        g = scratch.empty((self.chunk * prob.P * prob.Q * self.rsc,), self.acc)
        alpha = self.scalars.ctypes.data
        beta = alpha + self.scalars.itemsize
        handle = cupy.cuda.device.get_cublas_handle()
        image_dy, image_dx = prob.P * prob.Q * prob.K, prob.H * prob.W * prob.C
        for n0 in range(0, prob.N, self.chunk):
            images = min(self.chunk, prob.N - n0)
            # Column-major: g (RSC x M) = w (RSC x K) times dy (K x M), M = images * P * Q.
            cublas.gemmEx(handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, self.rsc,
                          images * prob.P * prob.Q, prob.K, alpha, w.data.ptr, self.data,
                          self.rsc, dy.data.ptr + n0 * image_dy * dy.itemsize, self.data,
                          prob.K, beta, g.data.ptr, self.acc_type, self.rsc, self.compute,
                          cublas.CUBLAS_GEMM_DEFAULT)
            total = images * image_dx
            self.function((min(-(-total // 256), 1 << 16),), (256,),
                          (g, dx[n0:n0 + images], np.int64(total), *self.ints))
        scratch.release()
