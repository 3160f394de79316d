"""A representative set of GPU calls for compute-sanitizer (memcheck, racecheck).

Every algorithm, both layouts, the full optimisation set and each switch off, on shapes with
tails, padding, groups and strides; small, so the sanitizer finishes in minutes.
``python3 tools/sanitize_cases.py [float16|wgmma]``: with ``float16``, every tile and switch of
the mma.sync kernel only (float32 with the planner's choices); with ``wgmma``, every tile and
switch of the Hopper kernel (float16 and bfloat16) and nothing else. Otherwise all of these, the
Hopper kernel's too where the device has it. Last, a captured CUDA graph of several problems,
replayed twice.
"""

import sys

import cupy
import ml_dtypes
import numpy as np

import im2win
from im2win.cuda import Options
from im2win.cuda.tuning import MMA_TILES, WGMMA_TILES

from im2win import cuda
from im2win.arrays import checked_problem

rng = np.random.default_rng(0)
CASES = [((2, 6, 13, 11), (10, 3, 3, 2), dict(groups=2, stride=(2, 1), padding=((2, 0), (1, 3)))),
         ((1, 3, 23, 23), (67, 3, 5, 5), dict(stride=4)),
         ((2, 16, 9, 7), (67, 16, 3, 2), dict(padding=1)),           # red % 8 == 0, K tail
         ((2, 3, 20, 21), (17, 3, 7, 7), dict(stride=2, padding=3))]  # C = 3, window edges
ONLY_FLOAT16 = sys.argv[1:] == ["float16"]
ONLY_WGMMA = sys.argv[1:] == ["wgmma"]
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


for layout in ("NCHW", "NHWC"):
    for x_shape, w_shape, kwargs in CASES:
        x = rng.uniform(-1, 1, x_shape).astype(np.float32)
        w = rng.uniform(-1, 1, w_shape).astype(np.float32)
        if layout == "NHWC":
            x, w = x.transpose(0, 2, 3, 1).copy(), w.transpose(0, 2, 3, 1).copy()
        x, w = cupy.asarray(x), cupy.asarray(w)
        b = cupy.asarray(rng.uniform(-1, 1, w_shape[0]).astype(np.float32))
        half = x.astype(cupy.float16), w.astype(cupy.float16), b.astype(cupy.float16)
        if HOPPER and not ONLY_FLOAT16:
            bf16 = tuple(a.astype(ml_dtypes.bfloat16) for a in (x, w, b))
            for arrays in (half, bf16):
                every_tile(*arrays, layout, kwargs, WGMMA_TILES)
            every_hopper_switch(*half, layout, kwargs)
        if ONLY_WGMMA:
            continue
        every_tile(*half, layout, kwargs, MMA_TILES)
        every_switch(*half, layout, kwargs, tensor_cores=True)
        for algorithm in ("direct", "im2win", "im2win_fused"):
            im2win.conv2d(x, w, b, layout=layout, algorithm=algorithm, **kwargs)
        if ONLY_FLOAT16:
            continue
        every_tile(x, w, b, layout, kwargs, cuda.TILES)
        every_switch(x, w, b, layout, kwargs, tensor_cores=False)
        im2win.conv2d(x.astype(cupy.float64), w.astype(cupy.float64), b.astype(cupy.float64),
                      layout=layout, **kwargs)
# A captured graph of several problems (fused and materialised), replayed twice.
stream = cupy.cuda.Stream(non_blocking=True)
calls = []
for (x_shape, w_shape, kwargs), dtype in zip(CASES, (np.float16, np.float32) * 2):
    x = cupy.asarray(rng.uniform(-1, 1, x_shape), dtype)
    w = cupy.asarray(rng.uniform(-1, 1, w_shape), dtype)
    for algorithm in ("im2win", "im2win_fused"):
        calls.append(((x, w), dict(kwargs, algorithm=algorithm)))
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
