"""Split-K on and off, on the network layers whose plan splits under a given rule.

``python3 tools/split_probe.py [MIN_SLICES] [DTYPE LAYOUT]`` on the GPU machine (defaults: 3,
float16 NHWC; 3 was the first rule). With `plan.SPLIT_MIN_SLICES` set to MIN_SLICES, every
network convolution whose "auto" plan splits the reduction is timed with split-K and with
`Options(split_k=False)`, and cuDNN alongside, each as `tools/suite_profile.py` measures (one
call at a time, back to back, host time, replayed from a CUDA graph); last, the geometric means
of cuDNN / im2win for each column.
"""

import sys

import cupy
import numpy as np

import im2win
from im2win import bench, cuda
from im2win.bench import GPU, SUITE_BATCH, bind, prepare, rotation
from im2win.cuda import Options
from im2win.cuda import plan as cuda_plan
from im2win.networks import NETWORKS
from suite_profile import measure


def main():
    args = sys.argv[1:]
    cuda_plan.SPLIT_MIN_SLICES = int(args[0]) if args else 3
    dtype, layout = args[1:3] if len(args) >= 3 else ("float16", "NHWC")
    device = GPU()
    have_torch = bench.torch_cuda_available()
    print("layer | kernel | impl | single us | b2b us | host us | graph us")
    table = []
    for net in NETWORKS.values():
        for conv in net:
            prob, _, _, x, w = prepare(conv, SUITE_BATCH["gpu"], dtype, layout, device)
            plan = cuda._plan(prob, x, w, "auto", None, None)
            if (plan.inner or plan).splits <= 1:
                continue
            inputs = rotation(x, device)
            impls = {"split": None, "nosplit": Options(split_k=False)}
            got = {}
            for impl, options in impls.items():
                def fn(x, w, _options=options, **kw):
                    return im2win.conv2d(x, w, options=_options, **kw)
                call, _ = bind(fn, inputs, w, layout, conv.kwargs)
                got[impl] = measure(device, call)
            if have_torch:
                call, _ = bind(bench.CUDNN, inputs, w, layout, conv.kwargs)
                got["cudnn"] = measure(device, call, torch_graph=True)
            for impl, times in got.items():
                print(f"{conv.name} | {(plan.inner or plan).kernel} | {impl} | " +
                      " | ".join(f"{t * 1e6:.1f}" for t in times), flush=True)
            table.append(got)
            del inputs
            cupy.get_default_memory_pool().free_all_blocks()
    if have_torch and table:
        print(f"\ngeometric means of cuDNN / im2win over {len(table)} layers:")
        for col, label in enumerate(("single", "b2b", "host", "graph")):
            means = {impl: np.exp(np.mean(np.log([g["cudnn"][col] / g[impl][col]
                                                  for g in table])))
                     for impl in ("split", "nosplit")}
            print(f"  {label:6s} split {means['split']:.3f}x  nosplit {means['nosplit']:.3f}x")


if __name__ == "__main__":
    main()
