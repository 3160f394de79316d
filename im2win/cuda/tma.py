"""Hopper's Tensor Memory Accelerator (TMA) in im2col mode, for the window tiles of x.

One `cp.async.bulk.tensor...im2col` copies, for one filter tap (r, s), a box of consecutive
output pixels by `channels` channels of an NHWC x into shared memory (a K-major tile of the
GEMM's pixel operand), with the convolution's padding, stride and dilation held in the
descriptor and zeros where the tap falls outside x. Iterating the taps in window order, each
tap's channels inside, keeps the window layout's reduction order; one thread issues a stage's
copies instead of a warpgroup computing addresses (docs/hopper.md, step 3).

`im2col_args` is pure (the descriptor's fields from the problem, checked against the TMA's
limits); `encode_im2col` and `encode_tiled` (the filter, a matrix) make the 128-byte
descriptors with `cuda.bindings` (on the GPU machine only). A descriptor holds its array's
address, so the launch layer encodes them per pair of pointers (`launch.TmaMaps`).
"""

from __future__ import annotations

from typing import NamedTuple

from im2win.problem import Problem

MAX_BOX = 256            # channels per pixel and pixels per column, each at most
CORNER_RANGE = 128       # 4-D tensors: each bounding-box corner in [-128, 127]


class Im2colArgs(NamedTuple):
    """cuTensorMapEncodeIm2col's arguments for x (NHWC), innermost dimension first."""

    dims: tuple[int, int, int, int]        # (C, W, H, N) elements
    strides: tuple[int, int, int]          # bytes between consecutive w, h, n
    lower: tuple[int, int]                 # (w, h) of the bounding box's lower corner: -padding
    upper: tuple[int, int]                 # (w, h): padding after - (extent - 1) * dilation
    channels: int                          # channels per pixel of one copy
    pixels: int                            # output pixels of one copy
    element_strides: tuple[int, int, int, int]   # (1, sw, sh, 1): the traversal strides


def im2col_args(prob: Problem, x_strides, channels: int, pixels: int) -> Im2colArgs:
    """The im2col descriptor of x for copies of `pixels` output pixels by `channels` channels;
    x_strides in elements, NCHW-lettered. Raises ValueError where the TMA cannot do it."""
    if prob.layout != "NHWC":
        raise ValueError("TMA im2col copies take NHWC x (channels innermost)")
    xn, xc, xh, xw = x_strides
    item = prob.dtype.itemsize
    if xc != 1:
        raise ValueError("TMA im2col copies need x's channels contiguous")
    if not (0 < channels <= MAX_BOX and 0 < pixels <= MAX_BOX) or channels * item % 16:
        raise ValueError(f"a copy is at most {MAX_BOX} channels by {MAX_BOX} pixels, its "
                         f"channel run a multiple of 16 bytes; got {channels} x {pixels}")
    strides = (xw * item, xh * item, xn * item)
    if any(s % 16 or s <= 0 or s >= 1 << 40 for s in strides):
        raise ValueError(f"TMA needs x's byte strides positive multiples of 16 below 2**40, "
                         f"got {strides}")
    lower = (-prob.pl, -prob.pt)
    upper = (prob.pr - (prob.S - 1) * prob.dw, prob.pb - (prob.R - 1) * prob.dh)
    if any(not -CORNER_RANGE <= v < CORNER_RANGE for v in lower + upper):
        raise ValueError(f"TMA im2col corners must lie in [-{CORNER_RANGE}, {CORNER_RANGE}), "
                         f"got lower {lower}, upper {upper}")
    if (prob.S - 1) * prob.dw >= 1 << 8 or (prob.R - 1) * prob.dh >= 1 << 8:
        raise ValueError("TMA im2col tap offsets must stay below 256")
    if not (prob.sw <= 8 and prob.sh <= 8):
        raise ValueError("TMA traversal strides are at most 8")
    return Im2colArgs((prob.C, prob.W, prob.H, prob.N), strides, lower, upper, channels,
                      pixels, (1, prob.sw, prob.sh, 1))


def tap_coordinates(prob: Problem, pixel: int, r: int, s: int, c0: int):
    """The copy's coordinates ({c, w, h, n} of the first output pixel's window corner) and
    im2col offsets ((s*dw, r*dh)) for the box starting at output pixel `pixel` (n, p, q
    flattened), tap (r, s), channels from c0."""
    n, pq = divmod(pixel, prob.P * prob.Q)
    p, q = divmod(pq, prob.Q)
    return ((c0, q * prob.sw - prob.pl, p * prob.sh - prob.pt, n), (s * prob.dw, r * prob.dh))


def _driver_enums(dtype_name: str, swizzle_bytes: int):
    """The driver module, the element type's enum and the swizzle of `swizzle_bytes` (128,
    64, or 0 for none)."""
    from cuda.bindings import driver
    types = {"float16": driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
             "bfloat16": driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
             "float32": driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32}
    swizzles = {128: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
                64: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B,
                0: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE}
    return driver, types[dtype_name], swizzles[swizzle_bytes]


def encode_tiled(a, dims, row_stride: int, box, swizzle_128b: bool = True):
    """The CUtensorMap of the 2-D CuPy array `a` ((dims[1], dims[0]) elements, rows
    `row_stride` bytes apart), boxes of box[0] x box[1] elements, zeros past its edges."""
    driver, dtype, swizzle = _driver_enums(a.dtype.name, 128 if swizzle_128b else 0)
    u32, u64 = driver.cuuint32_t, driver.cuuint64_t   # the bindings take no plain ints here
    result, tensor_map = driver.cuTensorMapEncodeTiled(
        dtype, u32(2), a.data.ptr, [u64(d) for d in dims], [u64(row_stride)],
        [u32(b) for b in box], [u32(1), u32(1)],
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if result != driver.CUresult.CUDA_SUCCESS:
        raise ValueError(f"cuTensorMapEncodeTiled refused dims {dims}, stride {row_stride}, "
                         f"box {box}: {result}")
    return tensor_map


def encode_im2col(x, args: Im2colArgs, swizzle: bool):
    """The CUtensorMap (cuda.bindings) of CuPy array x with `args`; keep it alive while a
    launch reads it (its `getPtr()` is the kernel parameter's address). `swizzle`: the
    shared-memory rows swizzled across their width (a box's channels: 128 or 64 bytes)."""
    row = args.channels * x.dtype.itemsize
    if swizzle and row not in (128, 64):
        raise ValueError(f"a swizzled im2col box has rows of 128 or 64 bytes, got {row}")
    driver, dtype, swizzle = _driver_enums(x.dtype.name, row if swizzle else 0)
    u32, u64 = driver.cuuint32_t, driver.cuuint64_t   # the bindings take no plain ints here
    result, tensor_map = driver.cuTensorMapEncodeIm2col(
        dtype, u32(4), x.data.ptr, [u64(d) for d in args.dims], [u64(s) for s in args.strides],
        list(args.lower), list(args.upper), u32(args.channels), u32(args.pixels),
        [u32(e) for e in args.element_strides],
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if result != driver.CUresult.CUDA_SUCCESS:
        raise ValueError(f"cuTensorMapEncodeIm2col refused {args}: {result}")
    return tensor_map
