"""Backward filter on the Hopper kernel: `im2win_wgmma_wgrad` (im2win_wgmma.cu).

dw = dy^T times the window operand, the pixels as the reduction: x's TMA im2col boxes (one tap,
64 channels, 64 pixels) and dy's tiled boxes (64 pixels by 64 filters), both read MN-major by
wgmma; output tiles of 128 filters by 64 or 128 channels of one tap, and split-K over pixel
ranges where the tiles are fewer than about two per SM, the partial sums added in a fixed order
(`split_reduce`): the same bits every run. It takes float16 and bfloat16 NHWC problems whose
C/G is a multiple of 8 (channel boxes past the group's are computed and not stored), with x's
channels and dy contiguous and 16-byte aligned, on compute
capability 9.0 (`refusal` says why not otherwise). `staged` gets other float16 and bfloat16
problems there by copies: NCHW x and dy channels-last, and with one group C padded with zeros
to a multiple of 8; the rest runs as forward convolutions (`im2win.gradients`).
"""

from __future__ import annotations

import ctypes

import numpy as np

from im2win.problem import Problem

HOPPER = 90
SLICE = 64                    # pixels per slice of the reduction
STAGES = {1: 8, 2: 6}         # ring depth by channel boxes per tile (NB): ~193 KB either way
TARGET_ITEMS = 2              # work items aimed at per SM (split-K)
MIN_SLICES = 8                # ... with at least this many slices per pixel range
MAX_SPLITS = 256
WGRAD_GEO = np.dtype([("npix", np.int64)] + [(name, np.int32) for name in (
    "PQ", "Q", "sh", "sw", "pt", "pl", "dh", "dw", "R", "S", "Cg", "Kg", "K", "G", "splits")],
    align=True)
CUDA_TYPES = {"float16": "half_t", "bfloat16": "bf16_t"}


def refusal(prob: Problem, x_strides, x_ptr: int, dy_ptr: int, arch: int | None) -> str | None:
    """Why the kernel cannot take this backward filter (None: it can)."""
    from im2win.cuda.tma import im2col_args
    if arch != HOPPER:
        return "it runs on compute capability 9.0"
    if prob.dtype.name not in CUDA_TYPES:
        return f"it takes float16 and bfloat16, not {prob.dtype.name}"
    if prob.layout != "NHWC" or prob.Cg * prob.dtype.itemsize % 16:
        return "it takes NHWC with C/groups a multiple of 8"
    if x_ptr % 16 or dy_ptr % 16 or prob.K * prob.dtype.itemsize % 16:
        return "x and dy must start 16-byte aligned, and K be a multiple of 8"
    if prob.N * prob.P * prob.Q >= 1 << 31:
        return "N*P*Q must stay below 2**31"
    try:
        im2col_args(prob, x_strides, SLICE, SLICE)
    except ValueError as err:
        return str(err)
    return None


def staged(prob: Problem, x, dy):
    """(problem, x, dy, dw buffer, finish) for `run` where the kernel can take the problem
    after copies: NCHW x and dy copied channels-last, and with one group C padded with zeros to
    a multiple of 8 (x's copy only; the padded channels' gradients are dropped); finish(dw2,
    dw) writes the result into dw in its layout. None where it cannot even so (see
    `refusal`). The copies are workspace of x's and dy's size; the kernel alone needs none."""
    import dataclasses

    import cupy
    from im2win.cuda import compute_capability
    from im2win.cuda.launch import element_strides
    if prob.N == 0 or prob.dtype.name not in CUDA_TYPES or \
            compute_capability(x.device.id) != HOPPER:
        return None
    step = 16 // prob.dtype.itemsize
    nchw = prob.layout == "NCHW"
    pad = -prob.C % step if prob.G == 1 else 0
    if nchw:
        x = x.transpose(0, 2, 3, 1)
        dy = cupy.ascontiguousarray(dy.transpose(0, 2, 3, 1))
    if pad:
        padded = cupy.zeros(x.shape[:3] + (prob.C + pad,), x.dtype)
        padded[..., :prob.C] = x
        x = padded
    elif nchw:
        x = cupy.ascontiguousarray(x)
    dy = cupy.ascontiguousarray(dy)
    inner = dataclasses.replace(prob, layout="NHWC", C=prob.C + pad)
    if refusal(inner, element_strides(x, "NHWC"), x.data.ptr, dy.data.ptr, HOPPER) is not None:
        return None
    if not (nchw or pad):
        return inner, x, dy, None, None            # as it is: run into dw directly

    def finish(dw2, dw):
        dw2 = dw2[..., :prob.Cg]
        dw[...] = dw2.transpose(0, 3, 1, 2) if nchw else dw2
    return inner, x, dy, cupy.empty((prob.K, prob.R, prob.S, inner.Cg), prob.dtype), finish


def choose(prob: Problem, sms: int) -> tuple[int, int]:
    """(channel boxes per tile NB, splits of the pixel range)."""
    nb = 2 if prob.Cg % (2 * SLICE) == 0 else 1
    tiles = -(-prob.Kg // 128) * prob.R * prob.S * -(-prob.Cg // (SLICE * nb)) * prob.G
    slices = -(-prob.N * prob.P * prob.Q // SLICE)
    splits = max(1, min(MAX_SPLITS, -(-TARGET_ITEMS * sms // tiles), slices // MIN_SLICES))
    return nb, splits


def kernel_name(dtype_name: str, nb: int) -> str:
    return f"im2win_wgmma_wgrad<{CUDA_TYPES[dtype_name]}, {nb}, {STAGES[nb]}>"


def smem_bytes(nb: int) -> int:
    """im2win_wgmma.cu's wgrad_smem_bytes."""
    return 1024 + STAGES[nb] * (2 + nb) * SLICE * 128 + 16 * STAGES[nb]


def specializations() -> set:
    return {("im2win_wgmma", kernel_name(d, nb)) for d in CUDA_TYPES for nb in STAGES}


def run(prob: Problem, x, dy, dw, x_strides) -> None:
    """dw (contiguous, K x R x S x C/G) = the w-gradient of `prob` from x and dy (CuPy)."""
    import cupy

    from im2win.cuda import tma
    from im2win.cuda.launch import (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, NULL,
                                    kernel)
    device = cupy.cuda.Device()
    sms = device.attributes["MultiProcessorCount"]
    nb, splits = choose(prob, sms)
    function = kernel("im2win_wgmma", kernel_name(prob.dtype.name, nb))
    smem = smem_bytes(nb)
    cupy.cuda.driver.funcSetAttribute(function.kernel.ptr,
                                      CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
    npix = prob.N * prob.P * prob.Q
    item = prob.dtype.itemsize
    maps = (tma.encode_im2col(x, tma.im2col_args(prob, x_strides, SLICE, SLICE), True),
            tma.encode_tiled(dy, (prob.K, npix), prob.K * item, (SLICE, SLICE)))
    partial = cupy.empty(splits * dw.size, np.float32) if splits > 1 else None
    geo = np.array((npix, prob.P * prob.Q, prob.Q, prob.sh, prob.sw, prob.pt, prob.pl, prob.dh,
                    prob.dw, prob.R, prob.S, prob.Cg, prob.Kg, prob.K, prob.G, splits),
                   WGRAD_GEO)
    pointers = np.array([0 if partial is None else partial.data.ptr, dw.data.ptr], np.uint64)
    blob = np.zeros(256 + 64, np.uint8)             # the two descriptors, 64-byte aligned
    at = blob.ctypes.data + (-blob.ctypes.data) % 64
    for i, m in enumerate(maps):
        ctypes.memmove(at + 128 * i, m.getPtr(), 128)
    params = np.array([pointers.ctypes.data, pointers.ctypes.data + 8, geo.ctypes.data, at,
                       at + 128], np.uint64)
    tiles = -(-prob.Kg // 128) * prob.R * prob.S * -(-prob.Cg // (SLICE * nb)) * prob.G
    grid = min(tiles * splits, sms)
    stream = cupy.cuda.get_current_stream().ptr
    cupy.cuda.driver.launchKernel(function.kernel.ptr, grid, 1, 1, 384, 1, 1, smem, stream,
                                  params.ctypes.data, 0)
    if partial is not None:
        T = CUDA_TYPES[prob.dtype.name]
        reduce = kernel("im2win_wgmma", f"split_reduce<{T}>")
        reduce((min(-(-dw.size // 256), 8 * 65535), 1, 1), (256, 1, 1),
               (partial, NULL, dw, np.int64(dw.size), np.int32(prob.K), np.int32(splits)))
