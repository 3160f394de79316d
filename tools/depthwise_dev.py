"""Develop the depthwise kernel in one GPU call: time variants of its two launch constants
(channels per thread as bytes, output columns per thread) on some network layers, each checked
against the float64 reference, with cuDNN alongside; a short table last.

    python3 tools/depthwise_dev.py [--layers mobilenet_v2.4,convnext_tiny.1] [--configs
        float16:NHWC,float32:NCHW] [--variants 16x4,8x4,16x2] [--batch 32]

A variant BxQ sets im2win.cuda.plan.DEPTHWISE_VECTOR_BYTES to B and the output columns per
thread to Q for every form ("auto": the planner's table, DEPTHWISE_WINDOWS) before planning
(NVRTC compiles what the variant names); times are back-to-back calls between CUDA events,
so the figure is the GPU's, and the bandwidth is of x, w and y, each moved once.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import im2win
from im2win import bench, reference
from im2win.cuda import plan as cuda_plan
from im2win.networks import NETWORKS
from im2win.problem import make_problem
from im2win.testing import allowed_error, relative_error

PEAK = 4.3e12      # the H200's copy bandwidth, measured (issue 12)
WINDOWS = dict(cuda_plan.DEPTHWISE_WINDOWS)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", default="mobilenet_v2.1,mobilenet_v2.4,mobilenet_v2.7,"
                        "efficientnet_b0.15,convnext_tiny.1,convnext_tiny.5")
    parser.add_argument("--configs", default="float16:NHWC,float32:NCHW,float32:NHWC")
    parser.add_argument("--variants", default="16xauto,16x4,16x2,16x8")
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args(argv)
    import cupy
    device = bench.GPU()
    convs = {c.name: c for net in NETWORKS.values() for c in net}
    lines, wrong = [], 0
    for config in args.configs.split(","):
        dtype, layout = config.split(":")
        for name in args.layers.split(","):
            conv = convs[name]
            kwargs = conv.kwargs
            x_host, w_host = bench.make_inputs(conv, args.batch, dtype, layout)
            x, w = cupy.asarray(x_host), cupy.asarray(w_host)
            prob = make_problem(x, w, layout=layout, **kwargs)
            moved = (x.nbytes + w.nbytes + int(np.prod(prob.y_shape)) * x.itemsize)
            ref = reference.conv2d(x_host[:1].astype(np.float64), w_host.astype(np.float64),
                                   layout=layout, **kwargs)
            inputs = bench.rotation(x, device)
            row = [f"{name:18s} {dtype[:4]} {layout}"]
            for variant in args.variants.split(","):
                vec_bytes, qt = variant.split("x")
                cuda_plan.DEPTHWISE_VECTOR_BYTES = int(vec_bytes)
                cuda_plan.DEPTHWISE_WINDOWS = {key: (auto if qt == "auto" else int(qt))
                                               for key, auto in WINDOWS.items()}
                cuda_plan.DEPTHWISE_QT = 4 if qt == "auto" else int(qt)
                im2win.cuda._calls.clear()         # remembered calls hold the last variant's plan
                turn = iter(range(1 << 30))

                def call():
                    return im2win.conv2d(inputs[next(turn) % len(inputs)], w, layout=layout,
                                         **kwargs)
                try:
                    y = im2win.conv2d(x, w, layout=layout, **kwargs)
                    err = relative_error(cupy.asnumpy(y[:1]).astype(np.float64), ref)
                    ok = err <= allowed_error(np.dtype(x.dtype), prob.reduction)
                    wrong += not ok
                    seconds = device.back_to_back(call, calls=20, repeats=5)
                    row.append(f"{variant} {seconds * 1e6:6.1f}us {moved / seconds / 1e12:4.2f}"
                               f"{'' if ok else ' WRONG'}")
                except Exception as e:        # a variant that does not build or launch
                    row.append(f"{variant} ERR {type(e).__name__}: {str(e)[:120]}")
            if bench.torch_cuda_available():
                call, _ = bench.bind(bench.CUDNN, inputs, w, layout, kwargs)
                seconds = device.back_to_back(call, calls=20, repeats=5)
                row.append(f"cudnn {seconds * 1e6:6.1f}us {moved / seconds / 1e12:4.2f}")
            lines.append(" | ".join(row))
            print(lines[-1], flush=True)
    print("\n".join(["", f"GPU us per call (back to back) and TB/s moved; peak {PEAK / 1e12} "
                     f"TB/s (batch {args.batch})"] + lines))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
