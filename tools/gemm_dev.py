"""The cuBLAS 1x1 path against the im2win kernel, on the GPU machine, in one process.

``python3 tools/gemm_dev.py [--network resnet50] [--batch 32] [--configs float32:NCHW,float16:NHWC]``

For each stride-1 1x1 convolution of the network: im2win.conv2d with algorithm='im2win_fused'
and with algorithm='gemm', microseconds for one call between CUDA events and per call back to
back (bench.GPU's two timings, inputs rotated past the L2 cache as in the benchmark), and the
two results' relative difference. The evidence for which of the two "auto" takes per dtype.
"""

import argparse

import cupy

import im2win
from im2win import bench, networks


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--network", default="resnet50", choices=list(networks.NETWORKS))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--configs", default="float32:NCHW,float16:NHWC")
    args = parser.parse_args()
    device = bench.GPU()
    convs = [c for c in networks.NETWORKS[args.network]
             if (c.R, c.S, c.stride, c.groups) == (1, 1, (1, 1), 1)]
    print(f"{'layer':16s}{'config':14s}{'fused one':>10s}{'b2b':>8s}{'gemm one':>10s}"
          f"{'b2b':>8s}  difference")
    for config in args.configs.split(","):
        dtype, layout = config.split(":")
        for conv in convs:
            _, _, _, x, w = bench.prepare(conv, args.batch, dtype, layout, device)
            inputs = bench.rotation(x, device)
            times, outputs = [], []
            for algorithm in ("im2win_fused", "gemm"):
                def fn(x, w, algorithm=algorithm, **kwargs):
                    return im2win.conv2d(x, w, algorithm=algorithm, **kwargs)
                call, first = bench.bind(fn, inputs, w, layout, conv.kwargs)
                outputs.append(first().astype(cupy.float64))
                times += [device.time(call) * 1e6, device.back_to_back(call, calls=20) * 1e6]
            diff = float(cupy.linalg.norm(outputs[1] - outputs[0]) / cupy.linalg.norm(outputs[0]))
            print(f"{conv.name:16s}{config:14s}" + "".join(f"{t:10.1f}" if i % 2 == 0 else
                                                          f"{t:8.1f}" for i, t in
                                                          enumerate(times)) + f"  {diff:.1e}",
                  flush=True)


if __name__ == "__main__":
    main()
