"""The kernels cuDNN runs for the benchmark layers, by name (torch.profiler), with their GPU time.

``python3 tools/cudnn_kernels.py [--layers cv8,cv4] [--dtype float16] [--layout NHWC]``

PyTorch's convolution on the layer's inputs as ``python -m im2win --compare`` calls it
(`bench.CUDNN`: cudnn.benchmark on, TF32 off, channels-last for NHWC), warmed up so that the
benchmark's algorithm search is done, then ten calls under the profiler: each name of the GPU
activity (kernels, their tile shape and algorithm in the name; memsets and copies too) and its
GPU time a call (summed over its launches in the call).
"""

from __future__ import annotations

import argparse
import collections
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", default="cv8,cv4")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--layout", default="NHWC")
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args(argv)
    from im2win import bench
    from im2win.layers import LAYERS
    device = bench.GPU()
    if not bench.torch_cuda_available():     # also sets cudnn.benchmark on and TF32 off
        print("error: PyTorch with CUDA is needed", file=sys.stderr)
        return 2
    import torch
    for name in args.layers.split(","):
        layer = LAYERS[name]
        _, _, _, x, w = bench.prepare(layer, args.batch, args.dtype, args.layout, device)
        call, _ = bench.bind(bench.CUDNN, [x], w, args.layout, layer.kwargs)
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                call()
            torch.cuda.synchronize()
        times = collections.defaultdict(float)
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                times[event.name] += event.device_time_total / 10
        for kernel, us in sorted(times.items(), key=lambda item: -item[1]):
            print(f"{name} {args.dtype} {args.layout}: {us:8.1f} us  {kernel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
