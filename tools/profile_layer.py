"""Run im2win.conv2d on one benchmark layer (batch 128) twice, for a profiler to watch.

``ncu --clock-control none -k regex:im2win --launch-skip 1 -c 1 python3
tools/profile_layer.py cv8 NCHW [algorithm] [dtype]`` profiles the second (warm) launch.
"""

import sys

import cupy

import im2win
from im2win import bench
from im2win.layers import LAYERS

name, layout = sys.argv[1], sys.argv[2]
algorithm = sys.argv[3] if len(sys.argv) > 3 else "auto"
dtype = sys.argv[4] if len(sys.argv) > 4 else "float32"
layer = LAYERS[name]
_, _, _, x, w = bench.prepare(layer, 128, dtype, layout, bench.GPU())
for _ in range(2):
    im2win.conv2d(x, w, stride=layer.stride, layout=layout, algorithm=algorithm)
cupy.cuda.Device().synchronize()
