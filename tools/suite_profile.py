"""Where the model-zoo layers' time goes, and which 1x1 path wins: per layer and
implementation, the single-call time (what `python -m im2win --suite` reports), back to back,
host time per call (issued without waiting), and GPU time from a CUDA graph of the same calls
(no host work at all).

``python3 tools/suite_profile.py DTYPE LAYOUT [KIND|all] [--network NET] [--profile NAME]`` on the GPU machine
(KIND one of `NetConv.kinds`: 1x1, 3x3, depthwise, ...; default 1x1). Implementations: im2win's
default ("auto", its plan's kernel and grid printed), im2win's cuBLAS GEMM where a layer can
take it ("gemm"), in NCHW the NHWC twin where "auto" does not take it ("nhwc"), and cuDNN through PyTorch as `bench.CUDNN` times it. `--profile NAME`: a
cProfile of 300 host calls of im2win's default on that layer, the top entries by own time.
`--compute32f` (float32): also the same cuBLAS GEMM with CUBLAS_COMPUTE_32F in place of the
plan's CUBLAS_COMPUTE_32F_PEDANTIC ("gemm32f"), while the handle's math mode allows no TF32
(checked; its largest difference from "gemm" printed), to see whether the pedantic type
keeps cuBLAS from faster FP32 kernels.
"""

import argparse
import cProfile
import pstats
import statistics
import sys

import cupy
import numpy as np

import im2win
from im2win import bench, cuda
from im2win.bench import GPU, SUITE_BATCH, bind, prepare, rotation
from im2win.cuda.plan import gemm_refusal
from im2win.networks import NETWORKS

CALLS = 10


def copy_call(moved: int, device):
    """A call copying moved / 2 bytes (moving `moved`) device to device on the current
    stream by cudaMemcpyAsync, its sources cycled as bench.rotation cycles a layer's x."""
    half = moved // 2 // 16 * 16
    sources = rotation(cupy.zeros(half, dtype=cupy.uint8), device)
    dst = cupy.empty(half, dtype=cupy.uint8)
    turn = [0]

    def call():
        src = sources[turn[0] % len(sources)]
        turn[0] += 1
        cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, half,
                                      cupy.cuda.runtime.memcpyDeviceToDevice,
                                      cupy.cuda.get_current_stream().ptr)
    return call


def graph_time(call, torch_graph: bool) -> float:
    """Seconds per call of CALLS calls replayed from one CUDA graph (captured after warm-up
    on a stream of its own; torch's own graph for cuDNN)."""
    if torch_graph:
        import torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                call()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(CALLS):
                call()
        replay = graph.replay
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    else:
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            call()
            stream.begin_capture()
            try:
                for _ in range(CALLS):
                    call()
            finally:                                # a failed capture ends here too
                graph = stream.end_capture()
        replay = lambda: graph.launch(stream)              # noqa: E731
    replay()
    runs = []
    for _ in range(5):
        begin, end = cupy.cuda.Event(), cupy.cuda.Event()
        begin.record(stream)
        replay()
        end.record(stream)
        end.synchronize()
        runs.append(cupy.cuda.get_elapsed_time(begin, end) / 1e3 / CALLS)
    return statistics.median(runs)


def gemm_compute(prob, x, w, layout):
    """conv2d's cuBLAS GEMM for `prob` as algorithm="gemm" plans it, but with the compute type
    CUBLAS_COMPUTE_32F (the plan's: CUBLAS_COMPUTE_32F_PEDANTIC), into a y made here once; its
    largest difference from the planned GEMM's result on x is printed."""
    from cupy.cuda import cublas
    plan = cuda._plan(prob, x, w, "gemm", None, None)
    gemm = cuda.launch.GemmCall(prob, plan)
    gemm.compute = cublas.CUBLAS_COMPUTE_32F
    y = im2win.conv2d(x, w, layout=layout, algorithm="gemm", **prob_kwargs(prob))
    ref = y.copy()

    def fn(x, w, layout, **kw):
        return gemm(x, w, None, y, cuda.launch.Scratch())
    fn(x, w, layout)
    scale = float(abs(ref).max()) or 1.0
    print(f"  gemm32f: largest difference from gemm {float(abs(y - ref).max()) / scale:.2e} "
          "of the largest output", flush=True)
    return fn


def prob_kwargs(prob) -> dict:
    """conv2d's keyword arguments for a 1x1 problem: its stride (no padding, one group)."""
    return {"stride": (prob.sh, prob.sw)}


def measure(device, call, torch_graph=False) -> tuple:
    single = device.time(call, min_runs=10, max_runs=40, min_seconds=0.05)
    b2b = device.back_to_back(call)
    host = device.host_time(call)
    try:
        graph = graph_time(call, torch_graph)
    except Exception as err:                    # noqa: BLE001 (reported, not fatal)
        print(f"  graph failed: {type(err).__name__}: {err}", file=sys.stderr)
        graph = float("nan")
    return single, b2b, host, graph


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dtype")
    ap.add_argument("layout")
    ap.add_argument("kind", nargs="?", default="1x1")
    ap.add_argument("--profile")
    ap.add_argument("--network", help="one network's layers only")
    ap.add_argument("--compute32f", action="store_true",
                    help="float32: time cuBLAS's GEMM with CUBLAS_COMPUTE_32F too")
    args = ap.parse_args()
    if args.compute32f:
        from cupy.cuda import cublas
        mode = cublas.getMathMode(cupy.cuda.device.get_cublas_handle())
        print(f"cuBLAS math mode of CuPy's handle: {mode}")
        # CUBLAS_DEFAULT_MATH (0) or CUBLAS_PEDANTIC_MATH (2), flags aside; not
        # CUBLAS_TF32_TENSOR_OP_MATH (3, CuPy's under CUPY_TF32=1), which CuPy does not export
        if args.dtype != "float32" or mode & 0xF not in (cublas.CUBLAS_DEFAULT_MATH, 2):
            raise SystemExit("--compute32f: float32 only, under FP32 math (not CUPY_TF32)")
    device = GPU()
    have_torch = bench.torch_cuda_available()
    convs = {c.name: c for key, net in NETWORKS.items() for c in net
             if args.network in (None, key)}
    if args.profile:
        conv = convs[args.profile]
        prob, _, _, x, w = prepare(conv, SUITE_BATCH["gpu"], args.dtype, args.layout, device)
        call, _ = bind(im2win.conv2d, rotation(x, device), w, args.layout, conv.kwargs)
        for _ in range(20):
            call()
        device.sync()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(300):
            call()
        prof.disable()
        device.sync()
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)
        return
    print("layer | kind | plan | impl | single us | b2b us | host us | graph us")
    table = []
    for name, conv in convs.items():
        if args.kind != "all" and args.kind not in conv.kinds:
            continue
        prob, _, _, x, w = prepare(conv, SUITE_BATCH["gpu"], args.dtype, args.layout, device)
        inputs = rotation(x, device)
        plan = cuda._plan(prob, x, w, "auto", None, None)
        inner = plan.inner or plan
        try:
            grid = inner.grid(prob.N, prob.G) if inner.tile is not None else "-"
        except Exception:                       # noqa: BLE001 (a description only)
            grid = "?"
        desc = f"{plan.algorithm}:{inner.kernel or '-'} grid {grid}"
        impls = {"auto": im2win.conv2d}
        if gemm_refusal(prob, cuda.launch.element_strides(x, args.layout)) is None:
            impls["gemm"] = lambda x, w, **kw: im2win.conv2d(x, w, algorithm="gemm", **kw)
        if args.layout == "NCHW" and plan.algorithm != "im2win_nhwc":
            try:                                   # the NHWC twin, where "auto" does not take it
                twin = cuda._plan(prob, x, w, "im2win_nhwc", None, None)
                impls["nhwc"] = lambda x, w, **kw: im2win.conv2d(x, w, algorithm="im2win_nhwc",
                                                                 **kw)
                print(f"  {name} nhwc: {(twin.inner or twin).kernel} in place {twin.x_in_place}")
            except (ValueError, TypeError):       # it cannot, or not this dtype
                pass
        if args.compute32f and "gemm" in impls:
            impls["gemm32f"] = gemm_compute(prob, x, w, args.layout)
        if have_torch:
            impls["cudnn"] = bench.CUDNN
        got = {}
        for impl, fn in impls.items():
            call, _ = bind(fn, inputs, w, args.layout, conv.kwargs)
            got[impl] = measure(device, call, torch_graph=impl == "cudnn")
            s, b, h, g = (t * 1e6 for t in got[impl])
            print(f"{name} | {','.join(conv.kinds)} | {desc} | {impl} | {s:.1f} | {b:.1f} | "
                  f"{h:.1f} | {g:.1f}", flush=True)
        table.append((name, got))
        del inputs
        cupy.get_default_memory_pool().free_all_blocks()
    if have_torch:
        print("\nsummary (geometric means of cuDNN / impl):")
        for impl in ("auto", "gemm", "gemm32f"):
            rows = [g for _, g in table if impl in g]
            if not rows:
                continue
            for col, label in enumerate(("single", "b2b", "host", "graph")):
                r = [g["cudnn"][col] / g[impl][col] for g in rows]
                print(f"  {impl:5s} {label:6s} {np.exp(np.mean(np.log(r))):.2f}x over {len(r)}")
        best = [max(g["cudnn"][0] / g[i][0] for i in ("auto", "gemm") if i in g)
                for _, g in table]
        print(f"  best of auto/gemm, single: {np.exp(np.mean(np.log(best))):.2f}x")


if __name__ == "__main__":
    main()
