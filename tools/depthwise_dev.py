"""Develop the depthwise kernels in one GPU call: time variants of their launch constants on
some network layers, each checked against the float64 reference, with cuDNN alongside; a short
table last.

    python3 tools/depthwise_dev.py [--layers mobilenet_v2.4,convnext_tiny.1] [--configs
        float16:NHWC,float32:NCHW] [--variants tile,q2,16x4,16x2] [--batch 32]

Variants (knobs joined by "+"): "tile" is the planner's choice (the Tensor-Core kernels, else
depthwise_rows, else depthwise_tile_nhwc, where they take the problem); "q2" / "q4" give
depthwise_tile_nhwc 2 / 4 output columns per thread in every form, "iN" aims its blocks at N items
(DEPTHWISE_TILE_ITEMS), "tN" makes them N threads (at most 256) aiming at N items, "vN" caps
its channel vectors per block at N, "hB" gives its threads B bytes of channels
(DEPTHWISE_TILE_THREAD_BYTES, 16 or 8), "all" gives it every map size
(DEPTHWISE_TILE_MAX_PIXELS); "norows" takes depthwise_rows out of the planner's choices
(the tile and register-window kernels as before it), "rqN" / "rvN" / "rpN" set its columns /
channels a thread and rows a strip for every form, "rtN" its block's threads at most, "rbN"
compiles it for at least N blocks an SM, "rfN" has its threads copy N input rows ahead
(DEPTHWISE_ROWS_PREFETCH; NHWC), "novec" runs NCHW on depthwise_rows, not depthwise_rows_vec,
"vaN" / "vwN" / "vbN" / "vmN" give depthwise_rows_vec N rows loaded ahead / N warps a block at
most / at least N blocks an SM / stride-1 maps of at least N output rows, "vvN" its vectors
of N bytes at most, "no7" no 7x7 form on it, "vhN" its window's halo from N lanes a side at
most, "rall" gives the rows kernels every map size; "mma" / "nomma" give the Tensor-Core kernels
(float16 and bfloat16 NHWC: depthwise_mma_small_nhwc on maps of at most
DEPTHWISE_MMA_SMALL_ROWS rows, depthwise_mma_nhwc above) every stride-1 form or none,
"nosmall" / "smallN" give depthwise_mma_small_nhwc maps of no rows / at most N rows, "cbN"
its CB, "nohalves" depthwise_mma_nhwc's A loads an ldmatrix.x4 a column block
(DEPTHWISE_MMA_HALVES); "bN" compiles all of depthwise.cu's kernels for at least N blocks an SM
(__launch_bounds__(256, N): fewer registers a thread); "BxQ" runs
depthwise_nhwc / depthwise_nchw (Options(smem=False)) with DEPTHWISE_VECTOR_BYTES = B and Q
output columns per thread for every form ("auto": the planner's table, DEPTHWISE_WINDOWS).

Times are GPU microseconds per call replayed from a CUDA graph of 10 calls (no host time;
cuDNN in PyTorch's graph) and, after the slash, back to back between CUDA events; the
bandwidth is of x, w and y, each moved once, at the graph's time. "copy" is a device-to-device
copy of half those bytes (so it moves as many), from sources cycled like x's (out of the L2
cache), timed the same way: what the layer's bytes cost at their size.
"""

from __future__ import annotations

import argparse
import functools
import sys

import numpy as np

import im2win
from im2win import bench, reference
from im2win.cuda import launch, plan as cuda_plan
from im2win.networks import NETWORKS
from im2win.problem import make_problem
from im2win.testing import allowed_error, relative_error
from suite_profile import copy_call, graph_time

PEAK = 4.3e12      # the H200's copy bandwidth, measured (issue 12)
WINDOWS = dict(cuda_plan.DEPTHWISE_WINDOWS)
TILE_QT = dict(cuda_plan.DEPTHWISE_TILE_QT)
ROWS = dict(cuda_plan.DEPTHWISE_ROWS)
PREFETCH = cuda_plan.DEPTHWISE_ROWS_PREFETCH
VEC_FORMS, VEC_HALO = cuda_plan.DEPTHWISE_ROWS_VEC_FORMS, cuda_plan.DEPTHWISE_ROWS_VEC_HALO
VEC = (cuda_plan.DEPTHWISE_ROWS_VEC, cuda_plan.DEPTHWISE_ROWS_VEC_BYTES,
       cuda_plan.DEPTHWISE_ROWS_VEC_AHEAD,
       cuda_plan.DEPTHWISE_ROWS_VEC_WARPS, cuda_plan.DEPTHWISE_ROWS_VEC_MIN_ROWS,
       cuda_plan.DEPTHWISE_ROWS_MIN_ROWS)
MMA = (cuda_plan.DEPTHWISE_MMA_FILTERS, cuda_plan.DEPTHWISE_MMA_SMALL_ROWS,
       cuda_plan.DEPTHWISE_MMA_SMALL_CB, cuda_plan.DEPTHWISE_MMA_HALVES)
TILE = (cuda_plan.DEPTHWISE_TILE_ITEMS, cuda_plan.DEPTHWISE_TILE_VECTORS,
        cuda_plan.DEPTHWISE_TILE_THREADS, cuda_plan.DEPTHWISE_TILE_MAX_PIXELS,
        cuda_plan.DEPTHWISE_TILE_THREAD_BYTES)


SOURCE = launch.source


def patched_source(blocks: int, row_blocks: int, vec_blocks: int = 0):
    """launch.source with depthwise.cu's kernels bounded to `blocks` blocks an SM, and then
    depthwise_rows to `row_blocks` and depthwise_rows_vec to `vec_blocks` (0: as is)."""
    def source(file: str) -> str:
        text = SOURCE(file)
        if file == "depthwise" and row_blocks:
            text = text.replace("__launch_bounds__(256)\n    depthwise_rows(",
                                f"__launch_bounds__(256, {row_blocks})\n    depthwise_rows(")
        if file == "depthwise" and vec_blocks:
            text = text.replace("__launch_bounds__(256)\n    depthwise_rows_vec(",
                                f"__launch_bounds__(256, {vec_blocks})\n    depthwise_rows_vec(")
        if file == "depthwise" and blocks:
            text = text.replace("__launch_bounds__(256)", f"__launch_bounds__(256, {blocks})")
        return text
    return source


def configure(variant: str):
    """Set the planner's constants for `variant` (knobs joined by "+"); return the Options to
    call with."""
    blocks = row_blocks = vec_blocks = 0
    cuda_plan.DEPTHWISE_TILE_QT = dict(TILE_QT)
    (cuda_plan.DEPTHWISE_TILE_ITEMS, cuda_plan.DEPTHWISE_TILE_VECTORS,
     cuda_plan.DEPTHWISE_TILE_THREADS, cuda_plan.DEPTHWISE_TILE_MAX_PIXELS,
     cuda_plan.DEPTHWISE_TILE_THREAD_BYTES) = TILE
    cuda_plan.DEPTHWISE_VECTOR_BYTES, cuda_plan.DEPTHWISE_WINDOWS = 16, dict(WINDOWS)
    cuda_plan.DEPTHWISE_QT = 4
    cuda_plan.DEPTHWISE_ROWS, cuda_plan.DEPTHWISE_ROWS_STRIP = dict(ROWS), None
    cuda_plan.DEPTHWISE_ROWS_THREADS = 256
    cuda_plan.DEPTHWISE_ROWS_PREFETCH = PREFETCH
    (cuda_plan.DEPTHWISE_ROWS_VEC, cuda_plan.DEPTHWISE_ROWS_VEC_BYTES,
     cuda_plan.DEPTHWISE_ROWS_VEC_AHEAD, cuda_plan.DEPTHWISE_ROWS_VEC_WARPS,
     cuda_plan.DEPTHWISE_ROWS_VEC_MIN_ROWS, cuda_plan.DEPTHWISE_ROWS_MIN_ROWS) = VEC
    cuda_plan.DEPTHWISE_ROWS_VEC_FORMS = VEC_FORMS
    cuda_plan.DEPTHWISE_ROWS_VEC_HALO = VEC_HALO
    (cuda_plan.DEPTHWISE_MMA_FILTERS, cuda_plan.DEPTHWISE_MMA_SMALL_ROWS,
     cuda_plan.DEPTHWISE_MMA_SMALL_CB, cuda_plan.DEPTHWISE_MMA_HALVES) = MMA
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
        elif knob in ("mma", "nomma"):         # the Tensor-Core kernels: every stride-1 form, none
            cuda_plan.DEPTHWISE_MMA_FILTERS = cuda_plan.DEPTHWISE_MMA_FORMS if knob == "mma" else ()
        elif knob == "nohalves":               # depthwise_mma_nhwc: an ldmatrix.x4 a block
            cuda_plan.DEPTHWISE_MMA_HALVES = False
        elif knob == "nosmall":                # depthwise_mma_nhwc on small maps too
            cuda_plan.DEPTHWISE_MMA_SMALL_ROWS = 0
        elif knob.startswith("small"):         # depthwise_mma_small_nhwc up to N rows
            cuda_plan.DEPTHWISE_MMA_SMALL_ROWS = int(knob[5:])
        elif knob.startswith("cb"):            # depthwise_mma_small_nhwc: CB = N
            cuda_plan.DEPTHWISE_MMA_SMALL_CB = int(knob[2:])
        elif knob == "norows":
            cuda_plan.DEPTHWISE_ROWS = {}
        elif knob[:2] in ("rq", "rv"):          # rows: columns, channels a thread
            at = ("rq", "rv").index(knob[:2])
            cuda_plan.DEPTHWISE_ROWS = {key: form[:at] + (int(knob[2:]),) + form[at + 1:]
                                        for key, form in cuda_plan.DEPTHWISE_ROWS.items()}
        elif knob.startswith("rp"):             # rows: output rows a strip
            cuda_plan.DEPTHWISE_ROWS_STRIP = int(knob[2:])
        elif knob.startswith("rf"):            # rows: N input rows copied ahead
            cuda_plan.DEPTHWISE_ROWS_PREFETCH = int(knob[2:])
        elif knob == "novec":                  # NCHW rows on scalars, not vectors
            cuda_plan.DEPTHWISE_ROWS_VEC = False
        elif knob.startswith("va"):            # rows on vectors: N rows loaded ahead
            cuda_plan.DEPTHWISE_ROWS_VEC_AHEAD = int(knob[2:])
        elif knob.startswith("vw"):            # rows on vectors: N warps a block at most
            cuda_plan.DEPTHWISE_ROWS_VEC_WARPS = int(knob[2:])
        elif knob.startswith("vb"):            # rows on vectors: at least N blocks an SM
            vec_blocks = int(knob[2:])
        elif knob.startswith("vv"):            # rows on vectors: of N bytes (or fewer)
            cuda_plan.DEPTHWISE_ROWS_VEC_BYTES = tuple(b for b in (16, 8, 4) if b <= int(knob[2:]))
        elif knob == "no7":                    # rows on vectors: no 7x7 form
            cuda_plan.DEPTHWISE_ROWS_VEC_FORMS = tuple(f for f in VEC_FORMS if f[0] != 7)
        elif knob.startswith("vh"):            # rows on vectors: halos of N lanes a side
            cuda_plan.DEPTHWISE_ROWS_VEC_HALO = int(knob[2:])
        elif knob.startswith("vm"):            # rows on vectors: stride-1 maps of N rows up
            cuda_plan.DEPTHWISE_ROWS_VEC_MIN_ROWS = int(knob[2:])
        elif knob == "rall":                   # the rows kernels on every map size
            cuda_plan.DEPTHWISE_ROWS_MIN_ROWS = 0
        elif knob.startswith("rb"):            # rows: at least N blocks an SM
            row_blocks = int(knob[2:])
        elif knob.startswith("rt"):
            cuda_plan.DEPTHWISE_ROWS_THREADS = int(knob[2:])
        elif knob.startswith("b"):             # at least N blocks an SM
            blocks = int(knob[1:])
        elif knob == "all":                   # every map size
            cuda_plan.DEPTHWISE_TILE_MAX_PIXELS = 1 << 62
        elif knob.startswith("v"):
            cuda_plan.DEPTHWISE_TILE_VECTORS = (min(8, int(knob[1:])), int(knob[1:]))
        else:
            raise ValueError(f"unknown variant {knob!r}")
    launch.source = patched_source(blocks, row_blocks, vec_blocks)
    launch._kernel.cache_clear()
    launch._executables.clear()
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
            call = copy_call(moved, device)
            graph = graph_time(call, False)
            row.append(f"copy {graph * 1e6:5.1f}us {moved / graph / 1e12:4.2f}")
            lines.append(" | ".join(row))
            print(lines[-1], flush=True)
    print("\n".join(["", f"GPU us per call (graph replay / back to back) and TB/s moved at the "
                     f"graph's time; peak {PEAK / 1e12} TB/s (batch {args.batch})"] + lines))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
