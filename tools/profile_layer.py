"""Run im2win.conv2d on one benchmark layer (batch 128) twice, for a profiler to watch.

``ncu --clock-control none -k regex:im2win_conv --launch-skip 1 -c 1 python3
tools/profile_layer.py cv8 NCHW`` profiles the second (warm) launch.
"""

import sys

import cupy

import im2win
from im2win import bench
from im2win.layers import LAYERS

name, layout = sys.argv[1], sys.argv[2]
algorithm = sys.argv[3] if len(sys.argv) > 3 else "auto"
layer = LAYERS[name]
_, _, _, x, w = bench.prepare(layer, 128, "float32", layout, bench.GPU())
for _ in range(2):
    im2win.conv2d(x, w, stride=layer.stride, layout=layout, algorithm=algorithm)
cupy.cuda.Device().synchronize()
