"""The GPU's copy bandwidth by size, the yardstick of issue 12's depthwise target ("70% of the
H200's copy bandwidth, ~4.3 TB/s measured, on the bytes the layer must move").

    python3 tools/copy_bandwidth.py [--mib 8,32,128,512,2048]

For each size (MiB moved: read plus written), four ways to move it, each replayed from a CUDA
graph of 10 calls (suite_profile.graph_time), the sources cycled out of the L2 cache as
bench.rotation cycles a layer's x: cudaMemcpyAsync device to device; a kernel copying 16-byte
vectors (4 a thread); the same kernel reading four bytes for each one it writes (a stride-2
depthwise layer's mix: x read, a quarter of it written); a kernel only reading; and
cudaMemsetAsync, only writing (the yardstick of an epilogue's stores: cv8 writes 396 MB of
y). TB/s of the bytes moved, a short table last.
"""

from __future__ import annotations

import argparse
import sys

import cupy

from im2win import bench
from suite_profile import copy_call, graph_time

CODE = r"""
extern "C" __global__ void copy16(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                  long long n, int ratio) {
  // each thread reads 4 vectors, a block's 4 * blockDim.x consecutive ones; every ratio-th
  // vector read is written (ratio 1: a copy; 0: nothing written unless a value is impossible)
  const long long base = (long long)blockIdx.x * blockDim.x * 4 + threadIdx.x;
  uint4 v[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const long long i = base + (long long)j * blockDim.x;
    v[j] = i < n ? src[i] : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const long long i = base + (long long)j * blockDim.x;
    if (i >= n) break;
    if (ratio > 0 ? i % ratio == 0 : v[j].x == 0x7fc00001u && v[j].y == 0x7fc00001u)
      dst[ratio > 0 ? i / ratio : 0] = v[j];
  }
}
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", default="8,16,32,64,128,256,512,2048")
    parser.add_argument("--after-torch", action="store_true",
                        help="first time a cuDNN convolution through PyTorch from a CUDA graph, "
                             "as tools/depthwise_dev.py does before its copy column")
    args = parser.parse_args(argv)
    if args.after_torch:
        import torch
        torch.backends.cudnn.benchmark = True
        x = torch.randn(32, 144, 56, 56, device="cuda", dtype=torch.float16)
        w = torch.randn(144, 1, 3, 3, device="cuda", dtype=torch.float16)
        x, w = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
        conv = lambda: torch.nn.functional.conv2d(x, w, padding=1, groups=144)   # noqa: E731
        print(f"cuDNN, mobilenet_v2.7's shape: {graph_time(conv, True) * 1e6:.1f} us")
    device = bench.GPU()
    kernel = cupy.RawKernel(CODE, "copy16")
    lines = []
    for mib in map(int, args.mib.split(",")):
        moved = mib << 20
        row = [f"{mib:6d} MiB"]
        for way, read_share, ratio in (("memcpy", 0.5, 1), ("copy", 0.5, 1),
                                       ("read 4 : write 1", 0.8, 4), ("read only", 1.0, 0),
                                       ("write only", 0.0, 1)):
            n = int(moved * read_share) // 16
            total = n * 16 + (n // ratio * 16 if ratio else 0)
            if way == "memcpy":
                call = copy_call(moved, device)
            elif way == "write only":        # cudaMemsetAsync of the whole size
                dst, total = cupy.empty(moved, dtype=cupy.uint8), moved

                def call(dst=dst):
                    dst.data.memset_async(0, dst.nbytes)
            else:
                sources = bench.rotation(cupy.zeros(n * 16, dtype=cupy.uint8), device)
                dst = cupy.empty(max(n // max(ratio, 1), 1) * 16, dtype=cupy.uint8)
                turn = [0]

                def call(n=n, ratio=ratio, sources=sources, dst=dst, turn=turn):
                    src = sources[turn[0] % len(sources)]
                    turn[0] += 1
                    kernel((-(-n // 1024),), (256,), (src, dst, cupy.int64(n), cupy.int32(ratio)))
            seconds = graph_time(call, False)
            row.append(f"{way} {seconds * 1e6:8.1f}us {total / seconds / 1e12:4.2f}")
        lines.append(" | ".join(row))
        print(lines[-1], flush=True)
    print("\n".join(["", "TB/s of the bytes moved (read + written), replayed from CUDA graphs"]
                    + lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
