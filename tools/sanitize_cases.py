"""A representative set of GPU calls for compute-sanitizer (memcheck, racecheck).

Every algorithm, both layouts, the full optimisation set and each switch off, on shapes with
tails, padding, groups and strides; small, so the sanitizer finishes in minutes.
"""

import cupy
import numpy as np

import im2win
from im2win.cuda import Options

rng = np.random.default_rng(0)
CASES = [((2, 6, 13, 11), (10, 3, 3, 2), dict(groups=2, stride=(2, 1), padding=((2, 0), (1, 3)))),
         ((1, 3, 23, 23), (67, 3, 5, 5), dict(stride=4))]
for layout in ("NCHW", "NHWC"):
    for x_shape, w_shape, kwargs in CASES:
        x = rng.uniform(-1, 1, x_shape).astype(np.float32)
        w = rng.uniform(-1, 1, w_shape).astype(np.float32)
        if layout == "NHWC":
            x, w = x.transpose(0, 2, 3, 1).copy(), w.transpose(0, 2, 3, 1).copy()
        x, w = cupy.asarray(x), cupy.asarray(w)
        b = cupy.asarray(rng.uniform(-1, 1, w_shape[0]).astype(np.float32))
        for algorithm in ("direct", "im2win", "im2win_fused"):
            im2win.conv2d(x, w, b, layout=layout, algorithm=algorithm, **kwargs)
        for options in Options.ablations().values():
            for algorithm in ("im2win", "im2win_fused"):
                im2win.conv2d(x, w, b, layout=layout, algorithm=algorithm, options=options,
                              **kwargs)
        for dtype in (cupy.float16, cupy.float64):
            im2win.conv2d(x.astype(dtype), w.astype(dtype), b.astype(dtype), layout=layout,
                          **kwargs)
cupy.cuda.Device().synchronize()
print("sanitize cases ran")
