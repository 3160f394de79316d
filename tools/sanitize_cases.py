"""A representative set of GPU calls for compute-sanitizer (memcheck, racecheck).

Every algorithm, both layouts, the full optimisation set and each switch off, on shapes with
tails, padding, groups and strides; small, so the sanitizer finishes in minutes.
``python3 tools/sanitize_cases.py [float16|wgmma|tma|tf32|depthwise|narrow|rows|wide|pointwise|ffma|stems]``: with ``float16``, every tile
and switch of the mma.sync kernel only (float32 with the planner's choices); with ``wgmma``,
every tile and switch of the Hopper kernel (float16 and bfloat16) and its TMA copies; with
``tma``, only the TMA copies (every tile, both 16-bit types, boxes of 32 channels, the resident
filter and ping-pong consumers, the multicast filter (alone: ``multicast``), split-K, a stem
over its window columns, float32 as tf32 and 3xtf32, NCHW through the NHWC twin, and the
backward-filter kernel); with ``depthwise``, the
depthwise kernels' forms (each register window and the general one, a channel multiplier,
tails, groups of 2, 4 and 8 channels in NHWC, of 2 and 4 in NCHW on the NHWC twin; the planner's rows or (NHWC) tile kernel, the
register windows reading x in place, then the rows kernel in strips of 3 on every map it has a
form for (in NHWC also copying 2 input rows ahead), and for 16-bit NHWC the Tensor-Core kernel
on every stride-1 form) in every dtype and
both layouts; with ``narrow``,
narrow.cu's stems and groups (both 16-bit types, vector and element copies) and
narrow_wgmma.cu's dense stems; with ``rows``, narrow_rows_wgmma alone (stems of stride 2,
K < 64 too, with the device's grid and with one sized for a device of one SM); with
``wide``, rows_wgmma.cu alone (layers whose window columns lie 128 bytes apart: C = 32 at
stride 2, C = 64 at stride 1; padding, dilation, K tails, two filter blocks, the same two
grids); with ``pointwise``, pointwise.cu's 1x1 forms (both 16-bit types, x in place and a channel slice, y
and w off 16 bytes); with ``tf32``,
float32 on the Hopper kernel only ("tf32" and "3xtf32"); with ``ffma``,
the float32 CUDA-core kernels (im2win_ffma.cu's every tile and switch, in NHWC and through
the NCHW twin writing the NCHW y, its kExact forms on unpadded problems, wgrad_ffma.cu's
every tile, both x loads and split counts, backward data's window gradients of many
channels, and a float32 stem over its window columns and over its window's runs); with
``stems``, narrow_ffma.cu's float32 stems (1 to 4 channels, both layouts, filter tails and several filter blocks, padding,
stride and dilation, x a view, blocks looping over tiles, filters resident and a row at a
time, the NCHW y staged and not). Otherwise all of these, the Hopper kernel's too where the device has it. Last, a captured CUDA graph of several problems, replayed twice.
"""

import itertools
import sys

import cupy
import ml_dtypes
import numpy as np

import im2win
from im2win.cuda import Options
from im2win.cuda.tuning import MMA_TILES, THREE_TF32_TILES, WGMMA_TILES

from im2win import cuda
from im2win.arrays import checked_problem
from im2win.cuda import launch
from im2win.cuda import plan as cuda_plan

rng = np.random.default_rng(0)
CASES = [((2, 6, 13, 11), (10, 3, 3, 2), dict(groups=2, stride=(2, 1), padding=((2, 0), (1, 3)))),
         ((1, 3, 23, 23), (67, 3, 5, 5), dict(stride=4)),
         ((2, 16, 9, 7), (67, 16, 3, 2), dict(padding=1)),           # red % 8 == 0, K tail
         ((2, 3, 20, 21), (17, 3, 7, 7), dict(stride=2, padding=3))]  # C = 3, window edges
DEPTHWISE_CASES = [((2, 16, 13, 12), (16, 1, 3, 3), dict(padding=1)),
                   ((2, 24, 11, 17), (24, 1, 5, 5), dict(stride=2, padding=((2, 1), (0, 3)))),
                   ((1, 8, 9, 30), (8, 1, 7, 7), dict(padding=3)),
                   ((2, 5, 9, 10), (10, 1, 3, 3), dict(dilation=(2, 1), padding=2)),   # m = 2
                   ((2, 8, 10, 23), (8, 1, 3, 3), dict(stride=(1, 3), dilation=(1, 2),
                                                       padding=2)),                   # general
                   # depthwise_tile_nhwc: a channel tile's tail, two column tiles, 7x7 stride 2
                   ((2, 72, 15, 37), (72, 1, 5, 5), dict(padding=2)),
                   ((1, 40, 20, 19), (40, 1, 7, 7), dict(stride=2, padding=3)),
                   # depthwise_rows: an odd map at stride 2, padding on one side
                   ((2, 48, 17, 13), (48, 1, 3, 3), dict(stride=2, padding=((2, 0), (0, 1)))),
                   # depthwise_rows_vec (NCHW; the first case too): 5x5 at stride 2, more
                   # output columns than vectors
                   ((2, 12, 9, 56), (12, 1, 5, 5), dict(stride=2, padding=2)),
                   ((1, 6, 7, 120), (6, 1, 3, 3), dict(padding=((1, 1), (1, 4)))),
                   ((1, 8, 9, 32), (8, 1, 7, 7), dict(padding=3)),
                   # ... halos of 2 lanes a side (7x7 on vectors of 2 columns; 5x5 on 1 in
                   # float32) and 3 (7x7 on 1: float32), rows of 3 lanes, 7x7 on vectors of
                   # 4 (16-bit types)
                   ((2, 12, 14, 14), (12, 1, 7, 7), dict(padding=3)),
                   ((1, 10, 7, 7), (10, 1, 7, 7), dict(padding=3)),
                   ((1, 6, 8, 6), (6, 1, 7, 7), dict(padding=3)),
                   ((1, 6, 7, 7), (6, 1, 5, 5), dict(padding=2)),
                   ((2, 8, 9, 28), (8, 1, 7, 7), dict(padding=3))]
MODES = ("float16", "wgmma", "tma", "multicast", "tf32", "depthwise", "narrow", "rows", "wide",
         "pointwise", "ffma", "stems")
ONLY = sys.argv[1] if len(sys.argv) > 1 else None       # one mode's cases, or all of them
if ONLY is not None and ONLY not in MODES:
    sys.exit(f"sanitize_cases.py takes one of {', '.join(MODES)} or nothing, got {ONLY!r}")


def runs(*modes: str) -> bool:
    """Whether this run takes the cases of `modes` (every case runs with no mode given)."""
    return ONLY is None or ONLY in modes


# pointwise.cu's forms (NHWC 1x1, 16-bit): tails, C of 16 + 8 (zero columns), K from 8 to 96,
# x a channel slice, y and w one element off 16 bytes, blocks of one tile and of several:
# x, w (NCHW-lettered).
POINTWISE_CASES = [((2, 16, 9, 7), (24, 16, 1, 1)), ((1, 8, 5, 3), (8, 8, 1, 1)),
                   ((3, 24, 11, 13), (96, 24, 1, 1)), ((2, 240, 12, 9), (40, 240, 1, 1)),
                   ((4, 32, 29, 31), (16, 32, 1, 1))]
# narrow.cu's forms (NHWC, 16-bit): stems of C <= 8 (dense: C < 8, sw*C even and odd), groups
# of 8, 16 and 32, tails, strides, dilation, vector and element copies: x, w (NCHW-lettered),
# kwargs.
NARROW_CASES = [((2, 3, 23, 21), (32, 3, 3, 3), dict(stride=2, padding=1)),
                ((1, 3, 17, 19), (16, 3, 4, 4), dict(stride=4)),
                ((2, 5, 9, 13), (24, 5, 3, 2), dict(dilation=(2, 3), padding=((2, 0), (1, 3)))),
                ((2, 3, 29, 31), (64, 3, 7, 7), dict(stride=2, padding=3)),
                ((2, 3, 13, 17), (16, 3, 3, 3), dict(padding=((1, 0), (2, 1)))),
                ((2, 64, 12, 10), (64, 8, 3, 3), dict(groups=8, stride=2, padding=1)),
                ((1, 96, 9, 11), (96, 16, 3, 3), dict(groups=6, padding=(1, 2))),
                ((2, 128, 5, 7), (128, 32, 3, 1), dict(groups=4, stride=(1, 3)))]
# Grouped convolutions the depthwise kernel takes in NHWC (K = C, C/G of 2, 4, 8): x, w, kwargs.
SMALL_GROUP_CASES = [((2, 32, 9, 10), (32, 4, 3, 3), dict(groups=8, padding=1)),
                     ((2, 16, 7, 9), (16, 2, 3, 3), dict(groups=8, stride=2, padding=1)),
                     ((1, 64, 8, 9), (64, 8, 5, 5), dict(groups=8, padding=((2, 1), (0, 3))))]
HOPPER = cuda.compute_capability(cupy.cuda.runtime.getDevice()) == 90


def every_tile(x, w, b, layout, kwargs, tiles):
    prob = checked_problem(x, w, b, layout=layout, **kwargs)[0]
    for tile in tiles:
        for algorithm in ("im2win", "im2win_fused"):
            cuda.conv2d(prob, x, w, b, algorithm=algorithm, tile=tile)


def every_hopper_switch(x, w, b, layout, kwargs):
    prob = checked_problem(x, w, b, layout=layout, **kwargs)[0]
    for options in Options.ablations(hopper=True).values():
        for algorithm in ("im2win", "im2win_fused"):
            cuda.conv2d(prob, x, w, b, algorithm=algorithm, tile="wg128x128", options=options)


def every_switch(x, w, b, layout, kwargs, tensor_cores):
    for options in Options.ablations(tensor_cores=tensor_cores).values():
        for algorithm in ("im2win", "im2win_fused"):
            im2win.conv2d(x, w, b, layout=layout, algorithm=algorithm, options=options,
                          **kwargs)


sms = launch.sm_count


def use_grid(one_sm: bool) -> None:
    """Launch on the device's grid, or on one sized for a device of one SM (each block then
    loops over tiles); built Executables (they hold their grid) and remembered calls forgotten."""
    launch.sm_count = (lambda device: 1) if one_sm else sms
    launch._executables.clear()
    cuda._calls.clear()


# Each case twice: with the device's grid (a tile a block, on these sizes), then with one
# sized for a device of one SM, so that each block loops over tiles through both stages.
for (x_shape, w_shape), dtype, one_sm in itertools.product(
        POINTWISE_CASES, (np.float16, ml_dtypes.bfloat16), (False, True)):
    if not runs("pointwise"):
        break
    use_grid(one_sm)
    x, w, b = (rng.uniform(-1, 1, shape).astype(dtype) for shape in
               (x_shape, w_shape, w_shape[0]))
    x, w = cupy.asarray(x.transpose(0, 2, 3, 1).copy()), cupy.asarray(w.transpose(0, 2, 3, 1))
    im2win.conv2d(x, w, cupy.asarray(b), layout="NHWC", algorithm="pointwise")
    wide = cupy.zeros(x.shape[:3] + (x.shape[3] + 8,), x.dtype)     # pixels C + 8 apart
    wide[..., 8:] = x
    y_shape = x.shape[:3] + (w.shape[0],)
    out = cupy.empty(int(np.prod(y_shape)) + 1, x.dtype)[1:].reshape(y_shape)
    w_off = cupy.empty(w.size + 1, w.dtype)
    w_off[1:] = w.ravel()
    im2win.conv2d(wide[..., 8:], w_off[1:].reshape(w.shape), layout="NHWC",
                  algorithm="pointwise", out=out)
use_grid(False)
for (x_shape, w_shape, kwargs), dtype in itertools.product(
        NARROW_CASES, (np.float16, ml_dtypes.bfloat16)):
    if not runs("narrow"):
        break
    x, w, b = (rng.uniform(-1, 1, shape).astype(dtype) for shape in
               (x_shape, w_shape, w_shape[0]))
    x, w = cupy.asarray(x.transpose(0, 2, 3, 1).copy()), cupy.asarray(w.transpose(0, 2, 3, 1))
    im2win.conv2d(x, w, cupy.asarray(b), layout="NHWC", algorithm="narrow", **kwargs)
    wide = cupy.zeros(x.shape[:3] + (2 * x.shape[3],), x.dtype)    # a view: element copies
    wide[..., ::2] = x
    im2win.conv2d(wide[..., ::2], w, layout="NHWC", algorithm="narrow", **kwargs)
# narrow_wgmma.cu's narrow_dense_wgmma (Hopper) on every dense stem of K = 32 or 64 above and
# two more (three tiles a row; no padding), forced where "auto" leaves one to narrow_dense (32
# filters) or takes narrow_rows_wgmma.
pays, cuda_plan.narrow_wgmma_pays = cuda_plan.narrow_wgmma_pays, lambda prob: True
rows_pays, cuda_plan.narrow_rows_pays = cuda_plan.narrow_rows_pays, lambda prob: False
cuda._calls.clear()
for (x_shape, w_shape, kwargs), dtype in itertools.product(
        NARROW_CASES + [((2, 3, 9, 300), (64, 3, 3, 3), dict(padding=1)),
                        ((2, 3, 29, 31), (64, 3, 7, 7), dict(stride=2))],
        (np.float16, ml_dtypes.bfloat16)):
    if not (runs("narrow") and HOPPER) or w_shape[0] not in cuda_plan.NARROW_WGMMA_FILTERS or \
            x_shape[1] >= 8:
        continue
    x, w, b = (rng.uniform(-1, 1, shape).astype(dtype) for shape in
               (x_shape, w_shape, w_shape[0]))
    x, w = cupy.asarray(x.transpose(0, 2, 3, 1).copy()), cupy.asarray(w.transpose(0, 2, 3, 1))
    im2win.conv2d(x, w, cupy.asarray(b), layout="NHWC", algorithm="narrow", **kwargs)
cuda_plan.narrow_wgmma_pays, cuda_plan.narrow_rows_pays = pays, rows_pays
cuda._calls.clear()
# narrow_rows_wgmma (Hopper, stems of stride 2) forced, K < 64 too, with the device's grid and
# one sized for a device of one SM (a block's run of output rows crosses images).
ROWS_CASES = [((3, 3, 29, 31), (64, 3, 7, 7), dict(stride=2)),
              ((2, 3, 40, 45), (64, 3, 7, 7), dict(stride=2, padding=3)),
              ((3, 3, 23, 21), (32, 3, 3, 3), dict(stride=2, padding=1)),
              ((2, 4, 15, 224), (40, 4, 4, 4), dict(stride=2, padding=((2, 1), (3, 0)))),
              ((2, 2, 16, 20), (24, 2, 3, 7), dict(stride=2, dilation=(2, 1), padding=(1, 0)))]
pays, cuda_plan.narrow_rows_pays = cuda_plan.narrow_rows_pays, lambda prob: True
for (x_shape, w_shape, kwargs), dtype, one_sm in itertools.product(
        ROWS_CASES, (np.float16, ml_dtypes.bfloat16), (False, True)):
    if not (runs("narrow", "rows") and HOPPER):
        break
    use_grid(one_sm)
    x, w, b = (rng.uniform(-1, 1, shape).astype(dtype) for shape in
               (x_shape, w_shape, w_shape[0]))
    x, w = cupy.asarray(x.transpose(0, 2, 3, 1).copy()), cupy.asarray(w.transpose(0, 2, 3, 1))
    im2win.conv2d(x, w, cupy.asarray(b), layout="NHWC", algorithm="narrow",
                  options=Options(stem_rows=True), **kwargs)
    if not one_sm:                  # x one element off 16 bytes: its rows' edge chunks
        shifted = cupy.empty(x.size + 1, x.dtype)[1:].reshape(x.shape)
        shifted[...] = x
        im2win.conv2d(shifted, w, layout="NHWC", algorithm="narrow",
                      options=Options(stem_rows=True), **kwargs)
cuda_plan.narrow_rows_pays = pays
use_grid(False)
# rows_wgmma.cu (Hopper: window columns 128 bytes apart) forced, with the device's grid and one
# sized for a device of one SM (a block's run of tiles crosses images): x, w (NCHW-lettered).
WIDE_CASES = [((3, 32, 23, 30), (64, 32, 7, 7), dict(stride=2)),
              ((3, 32, 17, 21), (20, 32, 5, 5), dict(stride=2, padding=2)),
              ((2, 32, 23, 25), (64, 32, 3, 3), dict(stride=2, dilation=(2, 1), padding=(1, 0))),
              ((2, 64, 12, 40), (128, 64, 3, 3), dict(padding=1)),
              ((2, 64, 9, 33), (64, 64, 2, 5), dict(padding=((0, 3), (2, 1))))]
pays, cuda_plan.rows_wgmma_pays = cuda_plan.rows_wgmma_pays, lambda prob: True
for (x_shape, w_shape, kwargs), dtype, one_sm in itertools.product(
        WIDE_CASES, (np.float16, ml_dtypes.bfloat16), (False, True)):
    if not (runs("wide") and HOPPER):
        break
    use_grid(one_sm)
    x, w, b = (rng.uniform(-1, 1, shape).astype(dtype) for shape in
               (x_shape, w_shape, w_shape[0]))
    x, w = cupy.asarray(x.transpose(0, 2, 3, 1).copy()), cupy.asarray(w.transpose(0, 2, 3, 1))
    im2win.conv2d(x, w, cupy.asarray(b), layout="NHWC", **kwargs)
cuda_plan.rows_wgmma_pays = pays
use_grid(False)
# narrow_ffma.cu (float32 stems), both layouts, with the device's grid and with one sized for a
# device of one SM (each block loops over tiles): x, w (NCHW-lettered), kwargs.
STEM_CASES = [((2, 3, 23, 21), (40, 3, 3, 3), dict(stride=2, padding=1)),
              ((1, 3, 31, 29), (96, 3, 11, 11), dict(stride=4, padding=2)),
              ((2, 1, 12, 14), (30, 1, 3, 5), dict(stride=(2, 1), padding=((2, 0), (1, 3)),
                                                   dilation=(1, 2))),
              ((2, 4, 9, 12), (200, 4, 2, 3), dict(padding=((0, 1), (2, 0))))]
for (x_shape, w_shape, kwargs), layout, one_sm in itertools.product(
        STEM_CASES, ("NCHW", "NHWC"), (False, True)):
    if not runs("stems"):
        break
    use_grid(one_sm)
    x, w, b = (rng.uniform(-1, 1, shape).astype(np.float32) for shape in
               (x_shape, w_shape, w_shape[0]))
    if layout == "NHWC":
        x, w = x.transpose(0, 2, 3, 1).copy(), w.transpose(0, 2, 3, 1).copy()
    x, w = cupy.asarray(x), cupy.asarray(w)
    im2win.conv2d(x, w, cupy.asarray(b), layout=layout, algorithm="narrow", **kwargs)
    im2win.conv2d(x[:, ::-1] if layout == "NHWC" else x[:, :, ::-1], w, layout=layout,
                  algorithm="narrow", **kwargs)                 # a view: rows in reverse
    # the other filter form (resident or a row at a time), the other NCHW y (staged or not)
    # and the other window (packed or a plane a channel)
    forms = (cuda_plan.NARROW_FFMA_RESIDENT_BYTES, cuda_plan.NARROW_FFMA_STAGE_NCHW,
             cuda_plan.NARROW_FFMA_PACKED_REDUCTION)
    cuda_plan.NARROW_FFMA_RESIDENT_BYTES = 0 if forms[0] else 1 << 30
    cuda_plan.NARROW_FFMA_STAGE_NCHW = not forms[1]
    packed = w_shape[1] > 1 and int(np.prod(w_shape[1:])) >= forms[2]
    cuda_plan.NARROW_FFMA_PACKED_REDUCTION = 1 << 30 if packed else 0
    cuda._calls.clear()
    im2win.conv2d(x, w, cupy.asarray(b), layout=layout, algorithm="narrow", **kwargs)
    (cuda_plan.NARROW_FFMA_RESIDENT_BYTES, cuda_plan.NARROW_FFMA_STAGE_NCHW,
     cuda_plan.NARROW_FFMA_PACKED_REDUCTION) = forms
use_grid(False)
ROWS_MIN = cuda_plan.DEPTHWISE_ROWS_MIN_ROWS
MMA_PLANNED = (cuda_plan.DEPTHWISE_MMA_FILTERS, cuda_plan.DEPTHWISE_MMA_SMALL_ROWS,
               cuda_plan.DEPTHWISE_MMA_SMALL_CB)
for layout in ("NCHW", "NHWC"):
    if not runs("depthwise"):
        break
    for (x_shape, w_shape, kwargs), dtype in itertools.product(
            DEPTHWISE_CASES, (np.float16, ml_dtypes.bfloat16, np.float32, np.float64)):
        x, w, b = (rng.uniform(-1, 1, shape).astype(dtype) for shape in
                   (x_shape, w_shape, w_shape[0]))
        if layout == "NHWC":
            x, w = x.transpose(0, 2, 3, 1).copy(), w.transpose(0, 2, 3, 1).copy()
        # the planner's (rows or, in NHWC, tile kernel), the register windows, the rows
        # kernel on every map it has a form for, in strips of 3 output rows (in NHWC also
        # with 2 input rows copied ahead), then (16-bit NHWC) the Tensor-Core kernels on
        # every stride-1 form: depthwise_mma_nhwc, and depthwise_mma_small_nhwc with CB = 1
        # and 4
        for options, rows in ((None, False), (Options(smem=False), False), (None, True),
                              (None, "ahead"), (None, "mma"), (None, 1), (None, 4)):
            if rows == "ahead" and layout == "NCHW":
                continue
            if rows not in (False, True, "ahead") and (layout == "NCHW" or
                                                       np.dtype(dtype).itemsize != 2):
                continue
            cuda_plan.DEPTHWISE_ROWS_MIN_ROWS, cuda_plan.DEPTHWISE_ROWS_STRIP = \
                (0, 3) if rows in (True, "ahead") else (ROWS_MIN, None)
            cuda_plan.DEPTHWISE_ROWS_PREFETCH = 2 if rows == "ahead" else 0
            (cuda_plan.DEPTHWISE_MMA_FILTERS, cuda_plan.DEPTHWISE_MMA_SMALL_ROWS,
             cuda_plan.DEPTHWISE_MMA_SMALL_CB) = \
                MMA_PLANNED if rows in (False, True, "ahead") else \
                (cuda_plan.DEPTHWISE_MMA_FORMS, 0, 2) if rows == "mma" else \
                (cuda_plan.DEPTHWISE_MMA_FORMS, 1 << 30, rows)
            cuda._calls.clear()
            im2win.conv2d(cupy.asarray(x), cupy.asarray(w), cupy.asarray(b), layout=layout,
                          groups=x_shape[1], algorithm="depthwise", options=options, **kwargs)
cuda_plan.DEPTHWISE_ROWS_MIN_ROWS, cuda_plan.DEPTHWISE_ROWS_STRIP = ROWS_MIN, None
cuda_plan.DEPTHWISE_ROWS_PREFETCH = 0
(cuda_plan.DEPTHWISE_MMA_FILTERS, cuda_plan.DEPTHWISE_MMA_SMALL_ROWS,
 cuda_plan.DEPTHWISE_MMA_SMALL_CB) = MMA_PLANNED
cuda._calls.clear()
for (x_shape, w_shape, kwargs), dtype, layout in itertools.product(
        SMALL_GROUP_CASES, (np.float16, ml_dtypes.bfloat16, np.float32), ("NHWC", "NCHW")):
    if not runs("depthwise"):
        break
    if dtype == np.float32 and w_shape[1] == 8:
        continue                                  # 8 channels are more than a float32 vector
    if layout == "NCHW" and w_shape[1] == 8:
        continue                                  # NCHW: groups of 2 and 4 (plan.nchw_groups)
    x, w = (rng.uniform(-1, 1, shape).astype(dtype) for shape in (x_shape, w_shape))
    if layout == "NHWC":
        x, w = x.transpose(0, 2, 3, 1).copy(), w.transpose(0, 2, 3, 1).copy()
    im2win.conv2d(cupy.asarray(x), cupy.asarray(w), layout=layout, algorithm="depthwise",
                  **kwargs)
for layout in ("NCHW", "NHWC"):
    if not runs("float16", "wgmma"):
        break
    for x_shape, w_shape, kwargs in CASES:
        x = rng.uniform(-1, 1, x_shape).astype(np.float32)
        w = rng.uniform(-1, 1, w_shape).astype(np.float32)
        if layout == "NHWC":
            x, w = x.transpose(0, 2, 3, 1).copy(), w.transpose(0, 2, 3, 1).copy()
        x, w = cupy.asarray(x), cupy.asarray(w)
        b = cupy.asarray(rng.uniform(-1, 1, w_shape[0]).astype(np.float32))
        half = x.astype(cupy.float16), w.astype(cupy.float16), b.astype(cupy.float16)
        if HOPPER and ONLY != "float16":
            bf16 = tuple(a.astype(ml_dtypes.bfloat16) for a in (x, w, b))
            for arrays in (half, bf16):
                every_tile(*arrays, layout, kwargs, WGMMA_TILES)
            every_hopper_switch(*half, layout, kwargs)
        if ONLY == "wgmma":
            continue
        every_tile(*half, layout, kwargs, MMA_TILES)
        every_switch(*half, layout, kwargs, tensor_cores=True)
        for algorithm in ("direct", "im2win", "im2win_fused"):
            im2win.conv2d(x, w, b, layout=layout, algorithm=algorithm, **kwargs)
        if ONLY == "float16":
            continue
        every_tile(x, w, b, layout, kwargs, cuda.TILES)
        every_switch(x, w, b, layout, kwargs, tensor_cores=False)
        im2win.conv2d(x.astype(cupy.float64), w.astype(cupy.float64), b.astype(cupy.float64),
                      layout=layout, **kwargs)


def multicast_filter():
    """The TMA kernel's multicast filter (im2win_wgmma_tma_mc, clusters of two): both 16-bit
    types; odd tile counts (the last cluster's second block a ghost that multiplies the last
    tile and stores nothing), a single tile, boxes of 32 channels (cv4's form), a filter tail;
    the consumers in turn (ping-pong, PING_PONG_TILES lowered) and sharing each tile."""
    planned, waves = cuda_plan.PING_PONG_TILES, cuda_plan.MULTICAST_MIN_TILES
    cuda_plan.MULTICAST_MIN_TILES = 0                  # even a single tile
    try:
        for dtype, pp in itertools.product((np.float16, ml_dtypes.bfloat16), (1, 1 << 40)):
            cuda_plan.PING_PONG_TILES = pp
            for shape, wshape, kw in (((5, 41, 41, 32), (64, 7, 7, 32), dict(stride=2, padding=3)),
                                      ((1, 5, 5, 64), (64, 3, 3, 64), dict(padding=1)),
                                      ((7, 63, 61, 64), (100, 3, 3, 64), dict(padding=1))):
                x = cupy.asarray(rng.uniform(-1, 1, shape).astype(dtype))
                w = cupy.asarray(rng.uniform(-1, 1, wshape).astype(dtype))
                b = cupy.asarray(rng.uniform(-1, 1, wshape[0]).astype(dtype))
                im2win.conv2d(x, w, b, layout="NHWC", algorithm="im2win_fused",
                              options=Options(resident_filter=False, multicast=True), **kw)
    finally:
        cuda_plan.PING_PONG_TILES, cuda_plan.MULTICAST_MIN_TILES = planned, waves
        cuda._calls.clear()


def float32_on_tensor_cores():
    """float32 on the wgmma kernel: "tf32" and "3xtf32" (its split filter), every tile, a K
    tail, groups whose filter tiles run into the next group's rows, NCHW on the NHWC twin, a
    stem over its window columns in both layouts."""
    x = cupy.asarray(rng.uniform(-1, 1, (2, 9, 11, 64)).astype(np.float32))
    w = cupy.asarray(rng.uniform(-1, 1, (70, 3, 3, 64)).astype(np.float32))
    b = cupy.asarray(rng.uniform(-1, 1, 70).astype(np.float32))
    prob = checked_problem(x, w, b, layout="NHWC", stride=(2, 1), padding=1)[0]
    grouped = checked_problem(x, w[:, :, :, :32], b, layout="NHWC", groups=2)[0]   # Kg = 35
    for tile, precision in itertools.product(WGMMA_TILES, ("tf32", "3xtf32")):
        if precision == "3xtf32" and tile not in THREE_TF32_TILES:
            continue
        cuda.conv2d(prob, x, w, b, algorithm="im2win_fused", tile=tile, precision=precision)
        cuda.conv2d(grouped, x, cupy.ascontiguousarray(w[:, :, :, :32]), b,
                    algorithm="im2win_fused", tile=tile, precision=precision)
    stem_x = cupy.asarray(rng.uniform(-1, 1, (2, 20, 21, 3)).astype(np.float32))
    stem_w = cupy.asarray(rng.uniform(-1, 1, (17, 7, 7, 3)).astype(np.float32))
    for precision in ("tf32", "3xtf32"):          # NCHW on its NHWC twin
        im2win.conv2d(cupy.ascontiguousarray(x.transpose(0, 3, 1, 2)),
                      cupy.ascontiguousarray(w.transpose(0, 3, 1, 2)), b, padding=1,
                      precision=precision)
        for layout in ("NHWC", "NCHW"):           # a stem over window columns of 32
            order = (0, 3, 1, 2) if layout == "NCHW" else (0, 1, 2, 3)
            im2win.conv2d(cupy.ascontiguousarray(stem_x.transpose(order)),
                          cupy.ascontiguousarray(stem_w.transpose(order)), b[:17],
                          layout=layout, stride=2, padding=3, precision=precision)


# The wgmma kernel's TMA copies (NHWC, C/G a multiple of 64 or 32), every tile, both 16-bit types.
if HOPPER and runs("tma", "wgmma"):
    for dtype in (np.float16, ml_dtypes.bfloat16):
        x = cupy.asarray(rng.uniform(-1, 1, (2, 9, 11, 128)).astype(dtype))
        w = cupy.asarray(rng.uniform(-1, 1, (70, 3, 3, 128)).astype(dtype))
        b = cupy.asarray(rng.uniform(-1, 1, 70).astype(dtype))
        prob = checked_problem(x, w, b, layout="NHWC", stride=(2, 1), padding=1)[0]
        for tile in WGMMA_TILES:
            cuda.conv2d(prob, x, w, b, algorithm="im2win_fused", tile=tile)
        # The same in NCHW on its NHWC twin (layout.cu's copies around the TMA kernel).
        x_nchw = x.transpose(0, 3, 1, 2).copy()
        im2win.conv2d(x_nchw, w.transpose(0, 3, 1, 2).copy(), b, stride=(2, 1), padding=1,
                      algorithm="im2win_nhwc")
        # ... with x's copy in 16-byte words (C = 64, H*W = 128: layout.cu's transpose_words).
        im2win.conv2d(cupy.asarray(rng.uniform(-1, 1, (2, 64, 8, 16)).astype(dtype)),
                      cupy.asarray(rng.uniform(-1, 1, (24, 64, 3, 3)).astype(dtype)), padding=1,
                      algorithm="im2win_nhwc")
        # Boxes of 32 channels (C/G 32 and 96), a lone last unit, groups; every tile.
        for xs_shape, ws_shape, kw in (((2, 9, 11, 96), (70, 3, 3, 96), dict(padding=1)),
                                       ((2, 7, 7, 64), (130, 1, 1, 32), dict(groups=2))):
            xh = cupy.asarray(rng.uniform(-1, 1, xs_shape).astype(dtype))
            wh = cupy.asarray(rng.uniform(-1, 1, ws_shape).astype(dtype))
            prob = checked_problem(xh, wh, None, layout="NHWC", **kw)[0]
            for tile in WGMMA_TILES:
                cuda.conv2d(prob, xh, wh, None, algorithm="im2win_fused", tile=tile)
        # A stem over its window columns (layout.cu's window_columns, then the R x 1 problem),
        # both layouts (NCHW: y from the kernel's epilogue), as "auto" plans it on Hopper and
        # forced.
        xc, wc = (rng.uniform(-1, 1, s).astype(dtype) for s in ((2, 3, 20, 21), (17, 3, 7, 7)))
        for layout in ("NCHW", "NHWC"):
            if layout == "NHWC":
                xc, wc = xc.transpose(0, 2, 3, 1).copy(), wc.transpose(0, 2, 3, 1).copy()
            for algorithm in ("im2win_columns", "auto"):
                im2win.conv2d(cupy.asarray(xc), cupy.asarray(wc), layout=layout, stride=2,
                              padding=3, algorithm=algorithm)
        # An NCHW twin whose kernel writes the NCHW y from its epilogue (one work item a
        # tile: 288 tiles), the filter resident, a K tail.
        im2win.conv2d(cupy.asarray(rng.uniform(-1, 1, (9, 64, 34, 34)).astype(dtype)),
                      cupy.asarray(rng.uniform(-1, 1, (100, 64, 3, 3)).astype(dtype)),
                      padding=1, algorithm="im2win_nhwc")
        # ... and as planned: split-K (cv5 at batch 4; a 7x7 at stride 2 whose last range is
        # short or empty), ping-pong, the filter resident. Split-K's rule lowered to 3 slices a
        # range (the planner's asks for more), so these small cases split 4 and 8 ways.
        min_slices, cuda_plan.SPLIT_MIN_SLICES = cuda_plan.SPLIT_MIN_SLICES, 3
        cuda._calls.clear()    # no call remembered under the planner's own rule
        try:
            for xs_shape, ws_shape, kw in (((4, 24, 24, 96), (256, 5, 5, 96), {}),
                                           ((4, 40, 40, 32), (64, 7, 7, 32), dict(stride=2)),
                                           ((17, 34, 34, 32), (64, 3, 3, 32), dict(padding=1))):
                im2win.conv2d(cupy.asarray(rng.uniform(-1, 1, xs_shape).astype(dtype)),
                              cupy.asarray(rng.uniform(-1, 1, ws_shape).astype(dtype)),
                              layout="NHWC", **kw)
            # Few tiles: split-K (4 ranges of 3 slices), its partial sums and their reduction.
            xs = cupy.asarray(rng.uniform(-1, 1, (2, 7, 7, 768)).astype(dtype))
            ws = cupy.asarray(rng.uniform(-1, 1, (160, 1, 1, 768)).astype(dtype))
            im2win.conv2d(xs, ws, cupy.asarray(rng.uniform(-1, 1, 160).astype(dtype)),
                          layout="NHWC")
        finally:
            cuda_plan.SPLIT_MIN_SLICES = min_slices
            cuda._calls.clear()
        # More tiles than SPLIT_ITEMS with one filter tile: the filter resident, the consumers
        # in turn (ping-pong: PING_PONG_TILES lowered to what these small cases reach),
        # 128x128 (a filter tail) and 256x64; each switch off alone.
        planned = cuda_plan.PING_PONG_TILES
        cuda_plan.PING_PONG_TILES = cuda_plan.SPLIT_ITEMS
        try:
            for shape, k in (((17, 34, 34, 64), 100), ((33, 34, 34, 64), 64)):
                xr = cupy.asarray(rng.uniform(-1, 1, shape).astype(dtype))
                wr = cupy.asarray(rng.uniform(-1, 1, (k, 3, 3, 64)).astype(dtype))
                # (the multicast filter: multicast_filter below)
                for options in (Options(), Options(resident_filter=False),
                                Options(ping_pong=False)):
                    im2win.conv2d(xr, wr, layout="NHWC", options=options)
        finally:               # the cases after these run the planner's own threshold
            cuda_plan.PING_PONG_TILES = planned
        # The backward-filter kernel (im2win.cuda.wgrad): boxes of 64 channels (C of 128, 64)
        # and of 8 (C of 16), 128 filters a tile and 64 (SPLIT_N: 40 filters), tiles whose
        # last boxes are loaded and not stored, filter tails, split-K (the 990 pixels).
        dy = cupy.asarray(rng.uniform(-1, 1, (18, 5, 11, 70)).astype(dtype))
        xb = cupy.asarray(rng.uniform(-1, 1, (18, 9, 11, 128)).astype(dtype))
        for c, size, pad, k in itertools.product((128, 64, 16), (3, 1), (1, 0), (70, 40)):
            if (size == 1) == (pad == 1):
                continue
            im2win.conv2d_backward_filter(xb[..., :c], dy[..., :k], (k, size, size, c),
                                          layout="NHWC", stride=(2, 1), padding=pad)
        # One group of 3 channels through x's window columns (layout.cu's window_columns):
        # more rows of x (650) than the copy's blocks, so that its two row buffers take
        # turns; NHWC, and NCHW (a view of x read columns first).
        x3 = cupy.asarray(rng.uniform(-1, 1, (50, 13, 12, 3)).astype(dtype))
        dy3 = cupy.asarray(rng.uniform(-1, 1, (50, 5, 4, 16)).astype(dtype))
        im2win.conv2d_backward_filter(x3, dy3, (16, 5, 5, 3), layout="NHWC", stride=2)
        im2win.conv2d_backward_filter(cupy.ascontiguousarray(x3.transpose(0, 3, 1, 2)),
                                      cupy.ascontiguousarray(dy3.transpose(0, 3, 1, 2)),
                                      (16, 3, 5, 5), stride=2)
    float32_on_tensor_cores()
    multicast_filter()
elif HOPPER and ONLY == "tf32":
    float32_on_tensor_cores()
elif HOPPER and ONLY == "multicast":
    multicast_filter()
# float32 NHWC on CUDA cores: im2win_ffma.cu (every tile and switch; tails of pixels and
# filters, padding, stride, groups; NCHW x read in place), wgrad_ffma.cu (every tile, float4
# and scalar x loads, one split and several), and window gradients of many channels (backward
# data, cv12's form).
if runs("ffma"):
    from im2win.cuda import launch, wgrad_ffma
    from im2win.cuda.tuning import FFMA_TILES
    from im2win.problem import make_backward_filter_problem
    for x_shape, w_shape, kwargs in [((2, 9, 7, 16), (67, 3, 2, 16), dict(padding=1)),
                                     ((2, 11, 10, 16), (20, 3, 3, 8),
                                      dict(groups=2, stride=2, padding=((2, 0), (1, 3))))]:
        x = cupy.asarray(rng.uniform(-1, 1, x_shape).astype(np.float32))
        w = cupy.asarray(rng.uniform(-1, 1, w_shape).astype(np.float32))
        b = cupy.asarray(rng.uniform(-1, 1, w_shape[0]).astype(np.float32))
        prob = checked_problem(x, w, b, layout="NHWC", **kwargs)[0]
        for tile, name in itertools.product(FFMA_TILES, ("full", "no_double_buffer",
                                                         "no_conflict_free")):
            if prob.Cg % FFMA_TILES[tile].BK == 0:
                cuda.conv2d(prob, x, w, b, algorithm="im2win_fused", tile=tile,
                            options=Options.ablations()[name])
    # kExact (plan.ffma_exact: no bounds predicates), unpadded, filters filling the tiles:
    # NHWC, and NCHW on the twin reading x in place (float4 and staged y), with split-K
    for x_shape, layout, kwargs in [((2, 64, 9, 8), "NHWC", {}), ((3, 64, 12, 12), "NCHW", {}),
                                    ((2, 64, 9, 9), "NCHW", dict(stride=(1, 2)))]:
        x = rng.uniform(-1, 1, x_shape).astype(np.float32)
        w = rng.uniform(-1, 1, (128, 64, 3, 2)).astype(np.float32)
        if layout == "NHWC":
            x, w = x.transpose(0, 2, 3, 1).copy(), w.transpose(0, 2, 3, 1).copy()
        b = cupy.asarray(rng.uniform(-1, 1, 128).astype(np.float32))
        for splits in (1, 2):
            count = cuda_plan.ffma_split_count
            cuda_plan.ffma_split_count = lambda *args, **kw: splits
            cuda._calls.clear()
            im2win.conv2d(cupy.asarray(x), cupy.asarray(w), b, layout=layout,
                          algorithm="im2win_nhwc" if layout == "NCHW" else "im2win_fused",
                          **kwargs)
            cuda_plan.ffma_split_count = count
    cuda._calls.clear()
    # NCHW through the NHWC twin writing the NCHW y: im2win_ffma_to_nchw's float4 along the
    # pixels (P*Q = 144), its kStaged form through the x tiles' shared memory across the
    # images (P*Q = 63), every tile and switch.
    for x_shape in ((3, 16, 12, 12), (2, 16, 9, 7)):
        x = cupy.asarray(rng.uniform(-1, 1, x_shape).astype(np.float32))
        w = cupy.asarray(rng.uniform(-1, 1, (68, 16, 3, 3)).astype(np.float32))
        b = cupy.asarray(rng.uniform(-1, 1, 68).astype(np.float32))
        prob = checked_problem(x, w, b, layout="NCHW", padding=1)[0]
        for tile, name in itertools.product(FFMA_TILES, ("full", "no_double_buffer",
                                                         "no_conflict_free")):
            cuda.conv2d(prob, x, w, b, algorithm="im2win_nhwc", tile=tile,
                        options=Options.ablations()[name])
    # im2win_ffma_to_nchw's scalar stores: P*Q = 144 into a y 4 bytes off 16
    x = cupy.asarray(rng.uniform(-1, 1, (3, 16, 12, 12)).astype(np.float32))
    prob = checked_problem(x, w, b, layout="NCHW", padding=1)[0]
    buffer = cupy.empty(int(np.prod(prob.y_shape)) + 1, np.float32)
    cuda.conv2d(prob, x, w, b, buffer[1:].reshape(prob.y_shape), algorithm="im2win_nhwc")
    # x read in place (kStridedX, Plan.x_in_place) from channels 2-17 of a 20-channel x, every
    # tile (the loops above read whole NCHW arrays in place under the full set)
    big = cupy.asarray(rng.uniform(-1, 1, (2, 20, 9, 7)).astype(np.float32))
    w40, b40 = w[:40].copy(), b[:40].copy()          # 40 filters: tiles of 64 rows
    prob = checked_problem(big[:, 2:18], w40, b40, layout="NCHW", padding=1)[0]
    assert cuda._plan(prob, big[:, 2:18], w40, "im2win_nhwc", None, None).x_in_place
    for tile in FFMA_TILES:
        cuda.conv2d(prob, big[:, 2:18], w40, b40, algorithm="im2win_nhwc", tile=tile)
    # Split-K forced (the planner splits a GFLOP or more): 9 slices of 16 in 2, 4 and 8 ranges
    # (odd first slices, empty last ranges), partial sums and split_reduce, bias and tails;
    # NCHW on the NHWC twin (transpose_narrow's filter, split_reduce_nchw's y).
    from im2win.cuda import plan as planning
    count = planning.ffma_split_count
    x = cupy.asarray(rng.uniform(-1, 1, (2, 9, 7, 16)).astype(np.float32))
    w = cupy.asarray(rng.uniform(-1, 1, (70, 3, 3, 16)).astype(np.float32))
    b = cupy.asarray(rng.uniform(-1, 1, 70).astype(np.float32))
    # With the fixup (Options.split_fixup): each tile's last block sums the ranges (its
    # counter, the others' partial sums through L2) and writes y, NHWC, NCHW float4 (P*Q = 64)
    # and staged (P*Q = 63).
    x8 = cupy.asarray(rng.uniform(-1, 1, (2, 16, 8, 8)).astype(np.float32))
    pays = planning.ffma_fixup_pays
    planning.ffma_fixup_pays = lambda *args: True           # the fixup on every count
    for n, fixup in itertools.product(planning.SPLITS, (False, True)):
        planning.ffma_split_count = lambda *args, n=n, **kw: n
        cuda._calls.clear()
        launch._executables.clear()
        options = Options(split_fixup=fixup)
        im2win.conv2d(x, w, b, layout="NHWC", padding=1, options=options)
        im2win.conv2d(x.transpose(0, 3, 1, 2).copy(), w.transpose(0, 3, 1, 2).copy(), b,
                      padding=1, algorithm="im2win_nhwc", options=options)
        if fixup:
            im2win.conv2d(x8, w.transpose(0, 3, 1, 2).copy(), b, padding=1,
                          algorithm="im2win_nhwc", options=options)
    planning.ffma_split_count, planning.ffma_fixup_pays = count, pays
    cuda._calls.clear()
    launch._executables.clear()
    # A float32 stem over its window columns (layout.cu's window_columns<float>, copied by
    # cp.async), both layouts: more rows of x (600) than the copy's blocks on a 132-SM device,
    # so that its two row buffers take turns.
    xc, wc = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((30, 3, 20, 21), (17, 3, 7, 7)))
    for layout in ("NCHW", "NHWC"):
        if layout == "NHWC":
            xc, wc = xc.transpose(0, 2, 3, 1).copy(), wc.transpose(0, 2, 3, 1).copy()
        im2win.conv2d(cupy.asarray(xc), cupy.asarray(wc), layout=layout, stride=2, padding=3,
                      algorithm="im2win_columns")
    # Stems over their window's runs, materialised (window.cu's window_runs, then
    # im2win_ffma.cu's kTail forms) and fused (kTaps: x through the table, padded: checked;
    # unpadded with 96 filters: kExact): 11x11 at stride 4 (363 -> 368: the last slice's
    # copies in part and whole past the reduction), every 16-deep tile, NHWC and NCHW (staged
    # and float4 y), more rows of x_win than the copy's blocks (they loop), x and w read by
    # 4-byte copies along NCHW and NHWC.
    xr, wr = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((40, 3, 27, 30), (70, 3, 11, 11)))
    xe, we = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((9, 3, 27, 31), (96, 3, 11, 11)))
    for layout in ("NCHW", "NHWC"):
        if layout == "NHWC":
            xr, wr = xr.transpose(0, 2, 3, 1).copy(), wr.transpose(0, 2, 3, 1).copy()
            xe, we = xe.transpose(0, 2, 3, 1).copy(), we.transpose(0, 2, 3, 1).copy()
        for tile in (t for t in FFMA_TILES if FFMA_TILES[t].BK == 16):
            for fused in (False, True):
                prob = checked_problem(cupy.asarray(xr), cupy.asarray(wr), None, layout=layout,
                                       stride=4, padding=(1, 2))[0]
                cuda.conv2d(prob, cupy.asarray(xr), cupy.asarray(wr), None,
                            algorithm="im2win_runs", tile=tile,
                            options=Options(fused_runs=fused))
        prob = checked_problem(cupy.asarray(xe), cupy.asarray(we), None, layout=layout,
                               stride=4)[0]
        cuda.conv2d(prob, cupy.asarray(xe), cupy.asarray(we), None, algorithm="im2win_runs",
                    options=Options(fused_runs=True))
    for x_shape, w_shape, kwargs in [((3, 13, 11, 16), (36, 3, 3, 16), dict(padding=1)),
                                     ((2, 23, 21, 3), (20, 11, 11, 3), dict(stride=4))]:
        x = cupy.asarray(rng.uniform(-1, 1, x_shape).astype(np.float32))
        y_shape = im2win.conv2d(x, cupy.zeros(w_shape, cupy.float32), layout="NHWC",
                                **kwargs).shape
        dy = cupy.asarray(rng.uniform(-1, 1, y_shape).astype(np.float32))
        prob = make_backward_filter_problem(x, dy, w_shape, layout="NHWC", **kwargs)
        strides = launch.element_strides(x, "NHWC")
        for tile, vector, splits in itertools.product(wgrad_ffma.TILES, (False, True), (1, 3)):
            if vector and not wgrad_ffma.vector_x(prob, strides, x.data.ptr):
                continue
            wgrad_ffma.Runner(prob, strides, vector, tile, splits)(
                x, dy, cupy.empty(w_shape, cupy.float32))
    dy = cupy.asarray(rng.uniform(-1, 1, (3, 5, 5, 40)).astype(np.float32))
    im2win.conv2d_backward_data(dy, cupy.asarray(rng.uniform(-1, 1, (40, 3, 3, 24)),
                                                 np.float32), (3, 7, 7, 24), layout="NHWC")
# A captured graph of several problems (fused and materialised), replayed twice.
stream = cupy.cuda.Stream(non_blocking=True)
calls = []
for (x_shape, w_shape, kwargs), dtype in zip(CASES, (np.float16, np.float32) * 2):
    x = cupy.asarray(rng.uniform(-1, 1, x_shape), dtype)
    w = cupy.asarray(rng.uniform(-1, 1, w_shape), dtype)
    for algorithm in ("im2win", "im2win_fused"):
        calls.append(((x, w), dict(kwargs, algorithm=algorithm)))
x = cupy.asarray(rng.uniform(-1, 1, (2, 16, 13, 12)), np.float32)
calls.append(((x, cupy.asarray(rng.uniform(-1, 1, (16, 1, 3, 3)), np.float32)),
              dict(groups=16, padding=1)))                    # the depthwise kernel
x = cupy.asarray(rng.uniform(-1, 1, (2, 9, 10, 64)), np.float16)
calls.append(((x, cupy.asarray(rng.uniform(-1, 1, (64, 3, 3, 8)), np.float16)),
              dict(layout="NHWC", groups=8, padding=1)))      # narrow.cu's groups
if HOPPER:        # "3xtf32": its filter split into the call's workspace, then the kernel
    x = cupy.asarray(rng.uniform(-1, 1, (2, 9, 11, 64)), np.float32)
    calls.append(((x, cupy.asarray(rng.uniform(-1, 1, (70, 3, 3, 64)), np.float32)),
                  dict(layout="NHWC", padding=1, precision="3xtf32")))
outs = [im2win.conv2d(*arrays, **kwargs) for arrays, kwargs in calls]
with stream:
    stream.begin_capture()
    for (arrays, kwargs), out in zip(calls, outs):
        im2win.conv2d(*arrays, out=out, **kwargs)
    graph = stream.end_capture()
for _ in range(2):
    graph.launch(stream)
stream.synchronize()
cupy.cuda.Device().synchronize()
print("sanitize cases ran")
