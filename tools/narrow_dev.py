"""Develop the narrow kernel (narrow.cu) in one GPU call: time it on network layers against the
path "auto" took before it, and cuDNN, each result checked against the float64 reference; a
short table last.

    python3 tools/narrow_dev.py [--layers mobilenet_v2.0,resnext50_32x4d.11] [--dtype float16]
        [--variants before,8,4] [--batch 32]

Variants: "auto" is the planner's choice; "before" is "auto" with narrow.cu out of its
choices; "narrow" is algorithm="narrow" (the planner's block; stems densely packed where
narrow_dense takes them); "padded" is algorithm="narrow" with stems' C padded to 8
(narrow_nhwc); mtM forces M m16 tiles per warp where the kernel has them; "mma" is "auto"
with narrow_wgmma.cu (dense stems on Hopper) out of narrow.cu's forms (narrow_dense instead),
"wgmma" algorithm="narrow" with it forced where it runs (narrow_dense_wgmma), "wgmmaS" the
same with S stages; "rows" algorithm="narrow" with narrow_rows_wgmma forced where it runs
(Options(stem_rows=True): stems of stride 2; the other variants leave it out, "auto" as the
planner does), "rowsN" the same with narrow_rows_wgmma's PROBE N (parts left out: wrong
results, for timing only), "rowssS" (or "rowsNsS") with S stages. Each variant's first and
last images are checked.
Times are back-to-back calls between CUDA events (the GPU's figure); TFLOPS count
2*N*K*P*Q*(C/G)*R*S. The twelve benchmark layers (cv1..cv12) run at their own batch, 128.
"""

from __future__ import annotations

import argparse
import re
import sys

import numpy as np

import im2win
from im2win import bench, reference
from im2win.cuda import Options
from im2win.cuda import plan as cuda_plan
from im2win.layers import LAYERS as BENCHMARK_LAYERS
from im2win.networks import NETWORKS
from im2win.problem import make_problem
from im2win.testing import allowed_error, relative_error

LAYERS = ("mobilenet_v2.0,convnext_tiny.0,resnet50.0,resnext50_32x4d.2,resnext50_32x4d.7,"
          "resnext50_32x4d.11,resnext50_32x4d.13,resnext50_32x4d.17,resnext50_32x4d.19,"
          "resnext50_32x4d.23,cv7")


def forced_blocks(blocks, mt: int):
    """narrow_blocks with only `mt` m16 tiles per warp."""
    return lambda cp, stem, dense=False: [(kb, nw, tuple(m for m in mts if m == mt))
                                          for kb, nw, mts in blocks(cp, stem, dense)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", default=LAYERS)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--variants", default="before,narrow")
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args(argv)
    import cupy
    device = bench.GPU()
    convs = {c.name: c for net in NETWORKS.values() for c in net}
    convs.update(BENCHMARK_LAYERS)
    auto = (cuda_plan.NARROW_AUTO_STEM_REDUCTION, cuda_plan.NARROW_AUTO_GROUPS,
            cuda_plan.NARROW_AUTO_DENSE_REDUCTION)
    blocks, dense = cuda_plan.narrow_blocks, cuda_plan.narrow_dense
    wgmma_pays, stages = cuda_plan.narrow_wgmma_pays, cuda_plan.NARROW_WGMMA_STAGES
    rows_pays, rows_name = cuda_plan.narrow_rows_pays, cuda_plan.narrow_rows_kernel_name
    rows_stages = cuda_plan.NARROW_ROWS_STAGES
    lines, wrong, layout = [], 0, "NHWC"
    for name in args.layers.split(","):
        conv = convs[name]
        kwargs = conv.kwargs
        batch = bench.GPU_BATCH if name in BENCHMARK_LAYERS else args.batch
        x_host, w_host = bench.make_inputs(conv, batch, args.dtype, layout)
        x, w = cupy.asarray(x_host), cupy.asarray(w_host)
        prob = make_problem(x, w, layout=layout, **kwargs)
        ref = reference.conv2d(x_host[::max(batch - 1, 1)].astype(np.float64),
                               w_host.astype(np.float64), layout=layout, **kwargs)
        inputs = bench.rotation(x, device)
        row = [f"{name:20s}"]
        for variant in args.variants.split(","):
            if variant == "auto":          # the planner's own choice, everything in it
                (cuda_plan.NARROW_AUTO_STEM_REDUCTION, cuda_plan.NARROW_AUTO_GROUPS,
                 cuda_plan.NARROW_AUTO_DENSE_REDUCTION) = auto
                cuda_plan.narrow_blocks, cuda_plan.narrow_dense = blocks, dense
                algorithm = "auto"
            elif variant == "before":
                (cuda_plan.NARROW_AUTO_STEM_REDUCTION, cuda_plan.NARROW_AUTO_GROUPS,
                 cuda_plan.NARROW_AUTO_DENSE_REDUCTION) = 0, (), 0
                algorithm = "auto"
            else:
                (cuda_plan.NARROW_AUTO_STEM_REDUCTION, cuda_plan.NARROW_AUTO_GROUPS,
                 cuda_plan.NARROW_AUTO_DENSE_REDUCTION) = auto
                cuda_plan.narrow_blocks = (blocks if variant in ("narrow", "padded", "mma") or
                                           variant.startswith(("wgmma", "rows")) else
                                           forced_blocks(blocks, int(variant[2:])))
                cuda_plan.narrow_dense = ((lambda *a: False) if variant == "padded" else dense)
                algorithm = "narrow"
            forced = variant.startswith("wgmma")
            cuda_plan.narrow_wgmma_pays = ((lambda prob: False) if variant == "mma" else
                                           (lambda prob: True) if forced else wgmma_pays)
            cuda_plan.NARROW_WGMMA_STAGES = int(variant[5:]) if forced and variant[5:] else \
                stages
            cuda_plan.narrow_rows_pays = (rows_pays if variant == "auto" else
                                          (lambda prob, v=variant: v.startswith("rows")))
            if variant.startswith("rows"):
                algorithm = "narrow"
            if variant == "mma":
                algorithm = "auto"
            im2win.cuda._calls.clear()         # remembered calls hold the last variant's plan
            turn = iter(range(1 << 30))

            options = Options(stem_rows=True) if variant.startswith("rows") else None
            form = re.fullmatch(r"rows(\d*)(?:s(\d+))?", variant)
            probe = form.group(1) if form else ""
            cuda_plan.NARROW_ROWS_STAGES = int(form.group(2)) if form and form.group(2) else \
                rows_stages
            cuda_plan.narrow_rows_kernel_name = (
                (lambda dtype, C, p=probe: rows_name(dtype, C)[:-1] + f", {p}>") if probe else
                rows_name)

            def call():
                return im2win.conv2d(inputs[next(turn) % len(inputs)], w, layout=layout,
                                     algorithm=algorithm, options=options, **kwargs)
            try:
                y = im2win.conv2d(x, w, layout=layout, algorithm=algorithm, options=options,
                                  **kwargs)
                err = relative_error(cupy.asnumpy(y[::max(batch - 1, 1)]).astype(np.float64),
                                     ref)
                ok = err <= allowed_error(np.dtype(x.dtype), prob.reduction)
                wrong += not ok
                seconds = device.back_to_back(call, calls=20, repeats=5)
                row.append(f"{variant} {seconds * 1e6:6.1f}us {prob.flops / seconds / 1e12:5.1f}"
                           f"{'' if ok else ' WRONG'}")
            except Exception as e:        # a variant that does not build or launch
                row.append(f"{variant} ERR {type(e).__name__}: {str(e)[:100]}")
        if bench.torch_cuda_available():
            call, _ = bench.bind(bench.CUDNN, inputs, w, layout, kwargs)
            seconds = device.back_to_back(call, calls=20, repeats=5)
            row.append(f"cudnn {seconds * 1e6:6.1f}us {prob.flops / seconds / 1e12:5.1f}")
        lines.append(" | ".join(row))
        print(lines[-1], flush=True)
    print("\n".join(["", f"GPU us per call (back to back) and TFLOPS, {args.dtype} NHWC, batch "
                     f"{args.batch}"] + lines))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
