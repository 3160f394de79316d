"""Backward filter's split-K: the Hopper kernel alone (`wgrad.Runner`) per number of splits.

``python3 tools/wgrad_splits.py``: float16 NHWC, batch 128, the layers the kernel takes as they
lie; per layer its tile, tiles and slices, what `wgrad.choose` picks and its time, the fastest,
and every time measured (CUDA events, median after warm-up). One process, a line a layer.
"""
import cupy
import numpy as np

import im2win
from im2win.bench import GPU, make_inputs
from im2win.cuda import launch, wgrad
from im2win.layers import LAYERS
from im2win.problem import make_backward_filter_problem

dev = GPU()
for name in "cv4 cv5 cv6 cv8 cv9 cv10 cv11 cv12".split():
    L = LAYERS[name]
    xh, wh = make_inputs(L, 128, np.float16, "NHWC")
    x, w = cupy.asarray(xh), cupy.asarray(wh)
    y = im2win.conv2d(x, w, stride=L.stride, layout="NHWC")
    dy = cupy.asarray(cupy.random.default_rng(1).random(y.shape, dtype=cupy.float32).astype(y.dtype))
    prob = make_backward_filter_problem(x, dy, w.shape, stride=L.stride, layout="NHWC")
    strides = launch.element_strides(x, "NHWC")
    tile, chosen = wgrad.choose(prob, 132)
    tiles = wgrad.tiles(prob, tile)
    slices = -(-prob.N * prob.P * prob.Q // 64)
    dw = cupy.empty(w.shape, w.dtype)
    row = []
    for s in sorted({1, 2, 3, 4, 6, 8, 11, 16, 22, 33, 44, 66, 88, 132, chosen}):
        if s > slices or s > 256:
            continue
        r = wgrad.Runner(prob, strides, splits=s)
        row.append((s, 1e3 * dev.time(lambda: r(x, dy, dw), min_seconds=0.05)))
    best = min(row, key=lambda t: t[1])
    print(f"{name} tile {tile.nc}/{tile.cb}/{int(tile.split_n)} tiles {tiles} slices {slices} chosen {chosen} "
          f"({dict(row)[chosen]:.3f} ms) best {best[0]} ({best[1]:.3f} ms) | " +
          " ".join(f"{s}:{t:.3f}" for s, t in row))
