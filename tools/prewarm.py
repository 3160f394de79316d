"""Compile, in parallel, the kernels that the benchmark layers plan, into CuPy's disk cache.

``python3 tools/prewarm.py [--dtypes float32,float16] [--layouts NCHW,NHWC] [--jobs 16]
[--suite NETWORK|all] [--specializations REGEX] [--ablation KERNELS]``: plans for this
device's compute capability (the wgmma kernel's too on Hopper), inner plans' kernels too;
``--suite`` warms the convolutions of `im2win.networks` (batch 32, as ``python -m im2win
--suite``) instead of the twelve layers; ``--specializations`` compiles every specialisation
CI compiles whose name expression matches REGEX instead (e.g. ``im2win_mma`` before
compute-sanitizer runs); ``--ablation float32|float16|float16-wgmma`` plans with each of
tools/ablation.py's option sets of that kernel set (in its dtype) too; ``--expression
FILE:EXPR`` (repeatable) adds one kernel of FILE (e.g. ``im2win_wgmma:im2win_wgmma_tma<...>``).

The GPU machine's time is scarce and NVRTC compiles one instantiation at a time on first use;
this compiles them all at once beforehand (the benchmark then finds them cached). It uses only
`make_plan`, `Plan.file`, `Plan.kernel`, `Plan.inner` and `plan.source`, so it also warms older
commits (run it with that commit's tree on PYTHONPATH).
"""

import argparse
import concurrent.futures
import itertools
import multiprocessing
import re

import numpy as np

from im2win.bench import GPU_BATCH, SUITE_BATCH
from im2win.cuda.plan import CUDA_TYPES, FILE_ARCH, dtype_of, make_plan, source
from im2win.layers import LAYERS
from im2win.networks import NETWORKS
from im2win.problem import make_problem

OPTIONS = ("-std=c++17",)


def shape_problem(layer, batch: int, dtype: str, layout: str):
    """(prob, x's element strides) of `layer` for contiguous x and w, from shapes alone
    (nothing allocated: zero-stride arrays stand in for x and w)."""
    np_dtype = np.dtype(dtype_of(dtype))
    x_shape, w_shape = layer.shapes(batch, layout)
    x, w = (np.lib.stride_tricks.as_strided(np.empty(1, np_dtype), shape, (0,) * 4)
            for shape in (x_shape, w_shape))
    prob = make_problem(x, w, layout=layout, **layer.kwargs)
    C, H, W = prob.C, prob.H, prob.W
    return prob, ((C * H * W, H * W, W, 1) if layout == "NCHW" else (H * W * C, 1, W * C, C))


def planned(dtypes, layouts, layers, batch, arch, variants=(None,)):
    """(file, expression) of every kernel the layers run, default and materialised, with each
    of `variants` (Options; None: the defaults), inner plans' too."""
    out = set()
    for dtype in dtypes:
        for layout in layouts:
            out.add(("window", f"image_to_window<{CUDA_TYPES[dtype][0]}, "
                               f"{str(layout == 'NHWC').lower()}>"))
            for layer in layers:
                prob, strides = shape_problem(layer, batch, dtype, layout)
                for algorithm, options in itertools.product(("auto", "im2win"), variants):
                    try:
                        plan = make_plan(prob, x_strides=strides, w_aligned=True,
                                         algorithm=algorithm, options=options, arch=arch)
                    except ValueError:      # e.g. a workspace over the limit: not run either
                        continue
                    while plan is not None:
                        if plan.kernel:
                            out.add((plan.file, plan.kernel))
                        plan = plan.inner
    return sorted(out)


def compile_one(job):
    import cupy
    file, expression = job
    options = OPTIONS + ((f"-arch={FILE_ARCH[file]}",) if file in FILE_ARCH else ())
    cupy.RawModule(code=source(file), options=options, name_expressions=[expression]).compile()
    return expression


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtypes", default="float32,float16")
    parser.add_argument("--layouts", default="NCHW,NHWC")
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--suite", choices=list(NETWORKS) + ["all"])
    parser.add_argument("--specializations", metavar="REGEX")
    parser.add_argument("--ablation", choices=("float32", "float16", "float16-wgmma"),
                        help="every variant of tools/ablation.py's kernel set (its dtype)")
    parser.add_argument("--expression", action="append", default=[], metavar="FILE:EXPR",
                        help="one more kernel, e.g. a tools/wgmma_dev.py probe's (repeatable)")
    args = parser.parse_args()
    if args.specializations:
        from im2win.cuda.plan import specializations
        jobs = [job for job in specializations() if re.search(args.specializations, job[1])]
    else:
        import cupy

        from im2win.cuda import compute_capability
        arch = compute_capability(cupy.cuda.runtime.getDevice())
        if args.suite:
            nets = NETWORKS if args.suite == "all" else {args.suite: NETWORKS[args.suite]}
            layers, batch = [c for convs in nets.values() for c in convs], SUITE_BATCH["gpu"]
        else:
            layers, batch = list(LAYERS.values()), GPU_BATCH
        layouts = args.layouts.split(",")
        jobs = planned(args.dtypes.split(","), layouts, layers, batch, arch)
        if args.ablation:       # and the ablation's variants, in its own dtype
            from im2win.cuda import Options
            variants = tuple(Options.ablations(tensor_cores=args.ablation == "float16",
                                               hopper=args.ablation == "float16-wgmma").values())
            jobs = sorted({*jobs, *planned([args.ablation.split("-")[0]], layouts, layers, batch,
                                           arch, variants)})
    jobs += [tuple(extra.split(":", 1)) for extra in args.expression]
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
        done = list(pool.map(compile_one, jobs))
    print(f"prewarmed {len(done)} kernels")


if __name__ == "__main__":
    main()
