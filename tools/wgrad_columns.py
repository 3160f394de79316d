"""Backward filter of the layers with C = 3: x's window columns as channels against C padded.

``python3 tools/wgrad_columns.py``: float16 NHWC, batch 128, cv1, cv2, cv3 and cv7; per layer
and path (`wgrad.staged(..., columns=False/True)`) the whole call (copies, kernel, dw written
back) and the copies alone (CUDA events, median after warm-up), the tile and splits, and the
two results' largest difference relative to the largest value. One process, a line a layer.
"""
import cupy
import numpy as np

import im2win
from im2win.bench import GPU, make_inputs
from im2win.cuda import launch, wgrad
from im2win.layers import LAYERS
from im2win.problem import make_backward_filter_problem


def main():
    device = GPU()
    for name in ("cv1", "cv2", "cv3", "cv7"):
        layer = LAYERS[name]
        x_host, w_host = make_inputs(layer, 128, np.float16, "NHWC")
        x, w = cupy.asarray(x_host), cupy.asarray(w_host)
        y = im2win.conv2d(x, w, stride=layer.stride, layout="NHWC")
        dy = cupy.asarray(cupy.random.default_rng(1).random(y.shape, dtype=cupy.float32)
                          .astype(y.dtype))
        prob = make_backward_filter_problem(x, dy, w.shape, stride=layer.stride, layout="NHWC")
        line = [name]
        results = []
        for columns in (False, True):
            dw = cupy.empty(w.shape, w.dtype)

            def call():
                inner, x2, dy2, buffer, finish = wgrad.staged(prob, x, dy, columns)
                wgrad.run(inner, x2, dy2, buffer, launch.element_strides(x2, "NHWC"))
                finish(buffer, dw)
            whole = device.time(call, min_seconds=0.1)
            copies = device.time(lambda: wgrad.staged(prob, x, dy, columns), min_seconds=0.1)
            inner = wgrad.staged(prob, x, dy, columns)[0]
            call()
            results.append(dw.astype(cupy.float32))
            line.append(f"{'columns' if columns else 'padded'} {whole * 1e3:.3f} ms (copies "
                        f"{copies * 1e3:.3f}; {wgrad.choose(inner, 132)})")
        diff = float(cupy.abs(results[1] - results[0]).max() / cupy.abs(results[0]).max())
        print(" | ".join(line) + f" | difference {diff:.1e}")


if __name__ == "__main__":
    main()
