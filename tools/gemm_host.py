"""Host and device time per call of the cuBLAS 1x1 path on a tiny problem (where host time is
all there is), against the im2win kernel, CuPy's matmul and the bare cuBLAS calls, through
cupyx.profiler.benchmark. ``python3 tools/gemm_host.py`` on the GPU machine.

On the H200 (2026-12-01, before GemmCall): conv2d gemm 37.7 us of CPU per call, conv2d fused
16.4, cupy matmul 22.2, bare gemmStridedBatchedEx 16.2, bare gemmEx 16.1. With GemmCall (a
later run): conv2d gemm 20.3, conv2d fused 13.9, cupy matmul 18.0, bare gemmStridedBatchedEx
12.8, bare gemmEx 12.9.
"""
import cupy, numpy as np, im2win
from cupyx.profiler import benchmark
from cupy.cuda import cublas
from im2win.cuda import launch
x = cupy.random.uniform(-1, 1, (32, 1, 1, 32)).astype(cupy.float16)   # efficientnet_b0.2-like
w = cupy.random.uniform(-1, 1, (8, 1, 1, 32)).astype(cupy.float16)
def show(name, fn):
    r = benchmark(fn, n_repeat=200, n_warmup=20)
    print(f"{name:28s} cpu {np.median(r.cpu_times)*1e6:7.1f} us  gpu {np.median(r.gpu_times)*1e6:7.1f} us")
show("conv2d gemm", lambda: im2win.conv2d(x, w, layout="NHWC", algorithm="gemm"))
show("conv2d fused", lambda: im2win.conv2d(x, w, layout="NHWC", algorithm="im2win_fused"))
a2, b2 = w.reshape(8, 32), x.reshape(32, 32)
show("cupy matmul", lambda: b2 @ a2.T)
h = cupy.cuda.device.get_cublas_handle(); y = cupy.empty((32, 8), cupy.float16)
one, zero = np.ones((), np.float32), np.zeros((), np.float32)
def raw():
    cublas.gemmStridedBatchedEx(h, 1, 0, 8, 32, 32, one.ctypes.data, w.data.ptr, cupy.cuda.runtime.CUDA_R_16F, 32, 0, x.data.ptr, cupy.cuda.runtime.CUDA_R_16F, 32, 0, zero.ctypes.data, y.data.ptr, cupy.cuda.runtime.CUDA_R_16F, 8, 0, 1, cublas.CUBLAS_COMPUTE_32F, cublas.CUBLAS_GEMM_DEFAULT)
show("raw gemmStridedBatchedEx", raw)
def raw_ex():
    cublas.gemmEx(h, 1, 0, 8, 32, 32, one.ctypes.data, w.data.ptr, cupy.cuda.runtime.CUDA_R_16F, 32, x.data.ptr, cupy.cuda.runtime.CUDA_R_16F, 32, zero.ctypes.data, y.data.ptr, cupy.cuda.runtime.CUDA_R_16F, 8, cublas.CUBLAS_COMPUTE_32F, cublas.CUBLAS_GEMM_DEFAULT)
show("raw gemmEx", raw_ex)
