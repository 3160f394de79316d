"""Host time of one GEMM call four ways, for the cuBLAS path of 1x1 convolutions: CuPy's
cublasGemmStridedBatchedEx wrapper, the same function through ctypes, cublasLtMatmul through
ctypes with its algorithm chosen once (cublasLtMatmulAlgoGetHeuristic), and torch.matmul
(cuBLASLt inside PyTorch). ``python3 tools/gemm_lt.py`` on the GPU machine.

Each: host microseconds per call of 200 calls issued without waiting, and GPU microseconds
per call replayed back to back; results compared with CuPy's.
"""

import ctypes

import cupy
import numpy as np
from cupy.cuda import cublas

c_int, c_void_p, c_ll, c_u64, c_size_t = (ctypes.c_int, ctypes.c_void_p, ctypes.c_longlong,
                                           ctypes.c_uint64, ctypes.c_size_t)
R16F, R32F = cupy.cuda.runtime.CUDA_R_16F, cupy.cuda.runtime.CUDA_R_32F


def library(name):
    with open("/proc/self/maps") as maps:
        paths = [line.split()[-1] for line in maps if f"/{name}.so" in line]
    return ctypes.CDLL(paths[0] if paths else f"{name}.so")


class HeuristicResult(ctypes.Structure):
    _fields_ = [("algo", c_u64 * 8), ("workspaceSize", c_size_t), ("state", c_int),
                ("wavesCount", ctypes.c_float), ("reserved", c_int * 4)]


def check(status, what):
    if status != 0:
        raise RuntimeError(f"{what}: status {status}")


class LtGemm:
    """D (m x n, column-major) = op(A) op(B), as cublasGemmEx's arguments, planned once."""

    def __init__(self, lt, transa, transb, m, n, k, dtype, lda, ldb, ldc, compute):
        self.lt = lt
        handle = c_void_p()
        check(lt.cublasLtCreate(ctypes.byref(handle)), "create")
        self.handle = handle
        desc = c_void_p()
        check(lt.cublasLtMatmulDescCreate(ctypes.byref(desc), compute, R32F), "desc")
        for attr, value in ((3, transa), (4, transb)):       # TRANSA, TRANSB
            v = c_int(value)
            check(lt.cublasLtMatmulDescSetAttribute(desc, attr, ctypes.byref(v), 4), "trans")
        self.desc = desc
        rows_a, cols_a = (m, k) if transa == 0 else (k, m)
        rows_b, cols_b = (k, n) if transb == 0 else (n, k)
        self.layouts = []
        for rows, cols, ld in ((rows_a, cols_a, lda), (rows_b, cols_b, ldb), (m, n, ldc)):
            layout = c_void_p()
            check(lt.cublasLtMatrixLayoutCreate(ctypes.byref(layout), dtype, c_u64(rows),
                                                c_u64(cols), c_ll(ld)), "layout")
            self.layouts.append(layout)
        pref = c_void_p()
        check(lt.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "pref")
        ws = c_u64(0)
        check(lt.cublasLtMatmulPreferenceSetAttribute(pref, 1, ctypes.byref(ws), 8), "ws")
        results, count = (HeuristicResult * 1)(), c_int()
        a, b, c = self.layouts
        check(lt.cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, c, pref, 1, results,
                                                ctypes.byref(count)), "heuristic")
        assert count.value >= 1
        self.algo = results[0].algo                     # kept alive with self
        self.scalars = np.array([1, 0], np.float32)
        self.fixed = (handle, desc, c_void_p(self.scalars.ctypes.data))
        lt.cublasLtMatmul.restype = c_int

    def __call__(self, a_ptr, b_ptr, c_ptr, stream):
        h, desc, alpha = self.fixed
        la, lb, lc = self.layouts
        return self.lt.cublasLtMatmul(h, desc, alpha, c_void_p(a_ptr), la, c_void_p(b_ptr), lb,
                                      c_void_p(self.scalars.ctypes.data + 4), c_void_p(c_ptr),
                                      lc, c_void_p(c_ptr), lc, ctypes.byref(self.algo), None,
                                      c_size_t(0), c_void_p(stream))


def timed(fn, calls=200):
    """(host us, GPU us) per call: bench.GPU's host_time and back_to_back."""
    from im2win.bench import GPU
    device = GPU()
    return (device.host_time(fn, calls) * 1e6,
            device.back_to_back(fn, calls=calls, repeats=1) * 1e6)


def main():
    import torch
    lib = library("libcublas")
    lt = library("libcublasLt")
    i, p, ll = c_int, c_void_p, c_ll
    lib.cublasSetStream_v2.argtypes = [p, p]
    lib.cublasGemmStridedBatchedEx.argtypes = [p, i, i, i, i, i, p, p, i, i, ll, p, i, i, ll, p,
                                               p, i, i, ll, i, i, i]
    handle = cupy.cuda.device.get_cublas_handle()
    stream = cupy.cuda.get_current_stream().ptr
    print("problem | way | host us | gpu us | max |diff|")
    # NHWC 1x1 layers: y (K x NHW) = w^T (K x C) x (C x NHW), column-major; pixels, C, K
    for pixels, C, K, name in ((32 * 14 * 14, 384, 64, "mobilenet_v2.18"),
                               (32 * 56 * 56, 64, 64, "resnet50.1"),
                               (32 * 112 * 112, 32, 16, "mobilenet_v2.2")):
        for dtype, cdt, compute in ((cupy.float16, R16F, cublas.CUBLAS_COMPUTE_32F),
                                    (cupy.float32, R32F, cublas.CUBLAS_COMPUTE_32F_PEDANTIC)):
            x = cupy.random.uniform(-1, 1, (pixels, C)).astype(dtype)
            w = cupy.random.uniform(-1, 1, (K, C)).astype(dtype)
            y = cupy.empty((pixels, K), dtype)
            one, zero = np.ones((), np.float32), np.zeros((), np.float32)
            args = (1, 0, K, pixels, C, one.ctypes.data, w.data.ptr, cdt, C, 0, x.data.ptr, cdt,
                    C, 0, zero.ctypes.data, y.data.ptr, cdt, K, 0, 1, compute,
                    cublas.CUBLAS_GEMM_DEFAULT)
            ways = {"cupy wrapper": lambda: cublas.gemmStridedBatchedEx(handle, *args)}

            def raw():
                lib.cublasSetStream_v2(handle, stream)
                return lib.cublasGemmStridedBatchedEx(handle, *args)
            ways["ctypes Ex"] = raw
            gemm = LtGemm(lt, 1, 0, K, pixels, C, cdt, C, C, K,
                          compute if dtype == cupy.float16 else cublas.CUBLAS_COMPUTE_32F)
            ways["ctypes Lt"] = lambda: gemm(w.data.ptr, x.data.ptr, y.data.ptr, stream)
            tx, tw = torch.from_dlpack(x), torch.from_dlpack(w)
            ways["torch matmul"] = lambda: torch.matmul(tx, tw.t())
            ref = None
            for way, fn in ways.items():
                y.fill(np.nan)
                out = fn()
                cupy.cuda.Device().synchronize()
                got = cupy.from_dlpack(out) if way == "torch matmul" else y.copy()
                if ref is None:
                    ref = got.astype(cupy.float64)
                diff = float(cupy.abs(got.astype(cupy.float64) - ref).max())
                host, gpu = timed(fn)
                print(f"{name} {np.dtype(dtype).name} | {way} | {host:.1f} | {gpu:.1f} | "
                      f"{diff:.3g}", flush=True)


if __name__ == "__main__":
    main()
