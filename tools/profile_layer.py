"""Run im2win.conv2d on one layer twice, for a profiler to watch: a benchmark layer (cv1 ..
cv12, batch 128) or a network layer (e.g. mobilenet_v2.7, batch 32).

``ncu --clock-control none -k regex:im2win --launch-skip 1 -c 1 python3
tools/profile_layer.py cv8 NCHW [algorithm] [dtype] [option=1 ...]`` profiles the second
(warm) launch; each option=0|1 sets that switch of ``Options`` (e.g. stem_rows=1).
"""

import sys

import cupy

import im2win
from im2win import bench
from im2win.cuda import Options
from im2win.layers import LAYERS
from im2win.networks import NETWORKS

name, layout = sys.argv[1], sys.argv[2]
algorithm = sys.argv[3] if len(sys.argv) > 3 else "auto"
dtype = sys.argv[4] if len(sys.argv) > 4 else "float32"
options = Options(**{k: v == "1" for k, v in (a.split("=") for a in sys.argv[5:])})
if name in LAYERS:
    layer, batch = LAYERS[name], 128
else:
    layer, batch = {c.name: c for net in NETWORKS.values() for c in net}[name], 32
_, _, _, x, w = bench.prepare(layer, batch, dtype, layout, bench.GPU())
for _ in range(2):
    im2win.conv2d(x, w, layout=layout, algorithm=algorithm, options=options, **layer.kwargs)
cupy.cuda.Device().synchronize()
