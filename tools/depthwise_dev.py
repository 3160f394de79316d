"""Develop the depthwise kernels in one GPU call: time variants of their launch constants on
some network layers, each checked against the float64 reference, with cuDNN alongside; a short
table last.

    python3 tools/depthwise_dev.py [--layers mobilenet_v2.4,convnext_tiny.1] [--configs
        float16:NHWC,float32:NCHW] [--variants tile,q2,16x4,16x2] [--batch 32]

Variants (knobs joined by "+"): "tile" is the planner's choice (depthwise_tile_nhwc where it
takes the problem); "q2" / "q4" give depthwise_tile_nhwc 2 / 4 output columns per thread in
every form, "iN" aims its blocks at N items (DEPTHWISE_TILE_ITEMS), "tN" makes them N threads
(at most 256) aiming at N items, "vN" caps its channel vectors per block at N, "hB" gives its
threads B bytes of channels (DEPTHWISE_TILE_THREAD_BYTES, 16 or 8), "all" gives it every map
size (DEPTHWISE_TILE_MAX_PIXELS); "BxQ" runs depthwise_nhwc / depthwise_nchw
(Options(smem=False)) with DEPTHWISE_VECTOR_BYTES = B and Q output columns per thread for
every form ("auto": the planner's table, DEPTHWISE_WINDOWS). Times are GPU microseconds per call replayed from a CUDA
graph of 10 calls (no host time; cuDNN in PyTorch's graph) and, after the slash, back to back
between CUDA events; the bandwidth is of x, w and y, each moved once, at the graph's time.
"""

from __future__ import annotations

import argparse
import functools
import sys

import numpy as np

import im2win
from im2win import bench, reference
from im2win.cuda import plan as cuda_plan
from im2win.networks import NETWORKS
from im2win.problem import make_problem
from im2win.testing import allowed_error, relative_error
from suite_profile import graph_time

PEAK = 4.3e12      # the H200's copy bandwidth, measured (issue 12)
WINDOWS = dict(cuda_plan.DEPTHWISE_WINDOWS)
TILE_QT = dict(cuda_plan.DEPTHWISE_TILE_QT)
TILE = (cuda_plan.DEPTHWISE_TILE_ITEMS, cuda_plan.DEPTHWISE_TILE_VECTORS,
        cuda_plan.DEPTHWISE_TILE_THREADS, cuda_plan.DEPTHWISE_TILE_MAX_PIXELS,
        cuda_plan.DEPTHWISE_TILE_THREAD_BYTES)


def configure(variant: str):
    """Set the planner's constants for `variant` (knobs joined by "+"); return the Options to
    call with."""
    cuda_plan.DEPTHWISE_TILE_QT = dict(TILE_QT)
    (cuda_plan.DEPTHWISE_TILE_ITEMS, cuda_plan.DEPTHWISE_TILE_VECTORS,
     cuda_plan.DEPTHWISE_TILE_THREADS, cuda_plan.DEPTHWISE_TILE_MAX_PIXELS,
     cuda_plan.DEPTHWISE_TILE_THREAD_BYTES) = TILE
    cuda_plan.DEPTHWISE_VECTOR_BYTES, cuda_plan.DEPTHWISE_WINDOWS = 16, dict(WINDOWS)
    cuda_plan.DEPTHWISE_QT = 4
    options = {}
    for knob in variant.split("+"):
        if knob == "tile":
            continue
        if "x" in knob:
            vec_bytes, qt = knob.split("x")
            cuda_plan.DEPTHWISE_VECTOR_BYTES = int(vec_bytes)
            cuda_plan.DEPTHWISE_WINDOWS = {key: (auto if qt == "auto" else int(qt))
                                           for key, auto in WINDOWS.items()}
            cuda_plan.DEPTHWISE_QT = 4 if qt == "auto" else int(qt)
            options["smem"] = False
        elif knob in ("q2", "q4"):
            cuda_plan.DEPTHWISE_TILE_QT = {key: int(knob[1]) for key in TILE_QT}
        elif knob.startswith("t"):             # blocks of N threads aiming at N items
            cuda_plan.DEPTHWISE_TILE_THREADS = cuda_plan.DEPTHWISE_TILE_ITEMS = int(knob[1:])
        elif knob.startswith("i"):
            cuda_plan.DEPTHWISE_TILE_ITEMS = int(knob[1:])
        elif knob.startswith("h"):             # a thread's channels as bytes
            cuda_plan.DEPTHWISE_TILE_THREAD_BYTES = int(knob[1:])
        elif knob == "all":                   # every map size
            cuda_plan.DEPTHWISE_TILE_MAX_PIXELS = 1 << 62
        elif knob.startswith("v"):
            cuda_plan.DEPTHWISE_TILE_VECTORS = (min(8, int(knob[1:])), int(knob[1:]))
        else:
            raise ValueError(f"unknown variant {knob!r}")
    return im2win.cuda.Options(**options) if options else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", default="mobilenet_v2.1,mobilenet_v2.21,efficientnet_b0.32,"
                        "efficientnet_b0.15,convnext_tiny.1,convnext_tiny.5")
    parser.add_argument("--configs", default="float16:NHWC,float32:NCHW,float32:NHWC")
    parser.add_argument("--variants", default="tile,16xauto,q2,q4,h16")
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
                options = configure(variant)
                im2win.cuda._calls.clear()         # remembered calls hold the last variant's plan
                call, _ = bench.bind(functools.partial(im2win.conv2d, options=options), inputs,
                                     w, layout, kwargs)
                try:
                    y = im2win.conv2d(x, w, layout=layout, options=options, **kwargs)
                    err = relative_error(cupy.asnumpy(y[:1]).astype(np.float64), ref)
                    ok = err <= allowed_error(np.dtype(x.dtype), prob.reduction)
                    wrong += not ok
                    graph = graph_time(call, False)
                    seconds = device.back_to_back(call, calls=20, repeats=5)
                    row.append(f"{variant} {graph * 1e6:5.1f}/{seconds * 1e6:5.1f}us "
                               f"{moved / graph / 1e12:4.2f}{'' if ok else ' WRONG'}")
                except Exception as e:        # a variant that does not build or launch
                    row.append(f"{variant} ERR {type(e).__name__}: {str(e)[:120]}")
            configure("tile")
            if bench.torch_cuda_available():
                call, _ = bench.bind(bench.CUDNN, inputs, w, layout, kwargs)
                graph = graph_time(call, True)
                seconds = device.back_to_back(call, calls=20, repeats=5)
                row.append(f"cudnn {graph * 1e6:5.1f}/{seconds * 1e6:5.1f}us "
                           f"{moved / graph / 1e12:4.2f}")
            lines.append(" | ".join(row))
            print(lines[-1], flush=True)
    print("\n".join(["", f"GPU us per call (graph replay / back to back) and TB/s moved at the "
                     f"graph's time; peak {PEAK / 1e12} TB/s (batch {args.batch})"] + lines))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
