"""Time every window algorithm x tile on the twelve layers (batch 128, both layouts).

The planner's tile choices (im2win/cuda/tuning.py: choose_tile, choose_mma_tile) are read off
these tables.
Run on the GPU machine: ``python3 tools/tile_sweep.py OUT.json [dtype]``.
"""

import json
import sys

import cupy

from im2win import bench, cuda
from im2win.cuda.tuning import NO_MICRO_KERNEL
from im2win.layers import LAYERS

path = sys.argv[1]
dtype = sys.argv[2] if len(sys.argv) > 2 else "float32"
device = bench.GPU()
rows = []
for layout in ("NCHW", "NHWC"):
    for name, layer in LAYERS.items():
        prob, _, _, x, w = bench.prepare(layer, 128, dtype, layout, device)
        # float16: autotune's default, every Tensor-Core tile.
        tiles = None if dtype == "float16" else [t for t in cuda.TILES if t != NO_MICRO_KERNEL]
        results = cuda.autotune(x, w, stride=layer.stride, layout=layout, tiles=tiles, repeat=5,
                                algorithms=("im2win_fused", "im2win"))   # tiles: no "auto"
        for algorithm, tile, ms in results:
            rows.append(dict(layer=name, layout=layout, algorithm=algorithm, tile=tile, ms=ms,
                             tflops=prob.flops / ms / 1e9))
        best = results[0]
        print(f"{layout} {name:5s} best {best[0]:13s} {best[1]:8s} {best[2]:7.3f} ms "
              f"{prob.flops / best[2] / 1e9:6.1f} TFLOPS   "
              + " ".join(f"{a[7:] or 'mat'}:{t}={ms:.2f}" for a, t, ms in results[:4]))
        del x, w
        cupy.get_default_memory_pool().free_all_blocks()
with open(path, "w") as f:
    json.dump(dict(command="python3 tools/tile_sweep.py " + " ".join(sys.argv[1:]), dtype=dtype,
                   rows=rows), f, indent=1)
