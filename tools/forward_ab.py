"""ResNet-50 forward passes with im2win's convolutions, the ways a PyTorch tensor can reach
them, against PyTorch's own forward, in one process (`examples/resnet50.py`'s model).

``python3 tools/forward_ab.py [--batch 32] [--rounds 3] [--layers] [--dtypes float16,float32]``
on the GPU machine. For
float16 NHWC and float32 NCHW, each round times (median of 10 forward passes between CUDA
events after a warm-up, and the host's time to issue one pass, unsynchronised): im2win on the
tensors (a call seen before through `launch.TorchCall`), the same with TorchCall's direct
path off for calls of more than one launch (views in, y back through DLPack), im2win with
that memo off (CuPy views made at every call by `interop.Door`, then the remembered CuPy
call), and PyTorch (cuDNN, TF32 off); then both forwards captured into CUDA graphs and
replayed (no host time: the GPU's work alone). With --profile (alone), each model's GPU
kernels of one eager forward pass (torch.profiler, the mean of 5 passes), summed by kernel
name, largest first: where the two forwards' GPU time differs. With --layers, each convolution's host microseconds a
call (its input from one forward pass; 100 calls unsynchronised, median of 5) through
TorchCall and through torch.nn.functional.conv2d, with the plan's algorithm, summed by
algorithm. With --stages (alone), the host time of each stage of one remembered float16
call on tensors, against F.conv2d's and PyTorch's small operations.
"""

import argparse
import copy
import runpy
import statistics
import time
from pathlib import Path

import torch

from im2win import cuda
from im2win.cuda import launch

ROOT = Path(__file__).resolve().parents[1]


def host_ms(fn, repeats=5) -> float:
    """Median host milliseconds to issue fn() (the GPU finishes after each timing)."""
    runs = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
    return statistics.median(runs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layers", action="store_true")
    ap.add_argument("--stages", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--dtypes", default="float16,float32")
    args = ap.parse_args()
    if args.stages:
        return stages()
    example = runpy.run_path(str(ROOT / "examples" / "resnet50.py"))
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    key = cuda.torch_call_key
    for dtype, layout in ((torch.float16, "NHWC"), (torch.float32, "NCHW")):
        if str(dtype).removeprefix("torch.") not in args.dtypes.split(","):
            continue
        memory = torch.channels_last if layout == "NHWC" else torch.contiguous_format
        torch.manual_seed(0)
        ref = example["resnet50"]().eval().to("cuda", dtype).to(memory_format=memory)
        ours = example["swap_convolutions"](copy.deepcopy(ref), layout)
        x = torch.randn(args.batch, 3, 224, 224, device="cuda", dtype=dtype)
        x = x.to(memory_format=memory)
        ways = {"TorchCall": (ours, key, True),
                "TorchCall, DLPack back": (ours, key, False),
                "views each call": (ours, lambda *a, **k: None, True),
                "PyTorch": (ref, key, True)}
        with torch.no_grad():
            ours(x)
            for rnd in range(args.rounds):
                cells = []
                for name, (model, keyer, direct) in ways.items():
                    cuda.torch_call_key = keyer
                    set_direct(direct)
                    try:
                        ms = example["timed"](lambda: model(x), "cuda")
                        host = host_ms(lambda: model(x))
                    finally:
                        cuda.torch_call_key = key
                        set_direct(True)
                    cells.append(f"{name} {ms:.2f} ms (host {host:.2f})")
                print(f"{dtype} {layout} round {rnd}: " + "; ".join(cells), flush=True)
            cells = []
            for name, model in (("im2win", ours), ("PyTorch", ref)):
                cells.append(f"{name} {graphed_ms(model, x):.2f} ms")
            print(f"{dtype} {layout} replayed from a CUDA graph: " + "; ".join(cells), flush=True)
            if args.profile:
                for name, model in (("im2win", ours), ("PyTorch", ref)):
                    profile(name, model, x, dtype, layout)
                continue
            if args.layers:
                per_layer(ours, x, dtype, layout)


def profile(name, model, x, dtype, layout, passes=5, top=12) -> None:
    """The GPU kernels of one forward pass of model(x), summed by kernel name (torch.profiler,
    CUPTI: CuPy's launches are seen too), the mean of `passes` passes; and each convolution's
    GPU span (a record_function range around the module: first kernel's start to last's end)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile
    from torch.profiler import record_function
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d) or hasattr(m, "layout")]
    ranges, hooks = {}, []
    for i, m in enumerate(convs):           # each convolution a range: its GPU span a pass
        def enter(m, args, i=i):
            ranges[i] = record_function(f"conv{i:02d}")
            ranges[i].__enter__()

        def leave(m, args, out, i=i):
            ranges.pop(i).__exit__(None, None, None)
        hooks += [m.register_forward_pre_hook(enter), m.register_forward_hook(leave)]
    model(x)
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(passes):
            model(x)
        torch.cuda.synchronize()
    for h in hooks:
        h.remove()
    kernels, spans = {}, {}
    for event in prof.events():
        if str(event.device_type).endswith("CUDA") and event.name.startswith("conv"):
            us = getattr(event, "device_time", None) or getattr(event, "cuda_time", 0)
            spans.setdefault(event.name, []).append(us)
            continue
        if str(event.device_type).endswith("CUDA"):
            us = getattr(event, "device_time", None) or getattr(event, "cuda_time", 0)
            k = kernels.setdefault(event.name, [0, 0.0])
            k[0] += 1
            k[1] += us
    total = sum(us for _, us in kernels.values()) / passes
    own = sum(us for k, (_, us) in kernels.items() if k.startswith("void at::native")) / passes
    print(f"{dtype} {layout} {name}: {total:.0f} us of kernels a pass, "
          f"{sum(n for n, _ in kernels.values()) // passes} kernels; PyTorch's own operations "
          f"(at::native) {own:.0f} us, the rest {total - own:.0f} us", flush=True)
    for kname, (n, us) in sorted(kernels.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"  {us / passes:8.1f} us {n // passes:4d}x  {kname[:110]}", flush=True)
    if spans:                              # the GPU span of each convolution, median of passes
        print(f"{dtype} {layout} {name} convolutions (GPU span, us): " + " ".join(
            f"{k[4:]}:{statistics.median(v):.1f}" for k, v in sorted(spans.items())), flush=True)
    else:
        print("no GPU ranges recorded", flush=True)


def graphed_ms(model, x, repeats=10) -> float:
    """Median milliseconds of a replay of model(x) captured into a CUDA graph (after warm-up
    passes on a side stream, as torch.cuda.graphs asks), between CUDA events."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model(x)
    graph.replay()
    runs = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        runs.append(start.elapsed_time(stop))
    return statistics.median(runs)


def set_direct(on: bool) -> None:
    """TorchCall's direct path for calls that are not one launch, on or off, in every
    remembered TorchCall (the first call of a key makes it with the path on)."""
    for call in list(cuda._calls.values()):
        if isinstance(call, launch.TorchCall):
            call.direct = on and not (call.call.copy_w or call.call.copy_bias)


def host_us(fn, calls=100) -> float:
    runs = []
    for _ in range(5):
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(runs)


def per_layer(model, x, dtype, layout) -> None:
    """Each swapped convolution's host time a call, ours against F.conv2d on the same tensors."""
    inputs = {}
    hooks = [m.register_forward_pre_hook(lambda m, a: inputs.setdefault(m, a[0]))
             for m in model.modules() if hasattr(m, "kwargs") and hasattr(m, "layout")]
    model(x)
    for h in hooks:
        h.remove()
    totals = {}
    print(f"{dtype} {layout}: layer | algorithm | fast | ours us | F.conv2d us")
    for i, (m, xin) in enumerate(inputs.items()):
        kw = {k: v for k, v in m.kwargs.items() if k != "layout"}
        weight = m.weight.permute(0, 3, 1, 2) if layout == "NHWC" else m.weight
        ours = host_us(lambda: m(xin))
        theirs = host_us(lambda: torch.nn.functional.conv2d(xin, weight, m.bias, **kw))
        xv = xin.permute(0, 2, 3, 1) if layout == "NHWC" else xin.contiguous()
        tc = cuda.cached_call(key_of(xv, m))
        algorithm = tc.call.exe.plan.algorithm if tc is not None else "?"
        fast = tc.call.fast if tc is not None else "?"
        t = totals.setdefault(algorithm, [0, 0.0, 0.0])
        t[0] += 1
        t[1] += ours
        t[2] += theirs
        print(f"{i} {tuple(m.weight.shape)} {kw['stride']} | {algorithm} | {fast} | "
              f"{ours:.1f} | {theirs:.1f}", flush=True)
    for algorithm, (n, ours, theirs) in totals.items():
        print(f"{dtype} {layout} {algorithm}: {n} layers, ours {ours:.0f} us, "
              f"F.conv2d {theirs:.0f} us")


def stages() -> None:
    """Host microseconds a call of each stage of a remembered float16 NHWC call on tensors
    (resnet50.13's shape at batch 32), against F.conv2d and PyTorch's own small operations."""
    import im2win
    torch.backends.cudnn.benchmark = True
    x = torch.randn(32, 128, 28, 28, device="cuda", dtype=torch.float16)
    x = x.to(memory_format=torch.channels_last)
    w4 = torch.randn(512, 128, 1, 1, device="cuda", dtype=torch.float16)
    xv = x.permute(0, 2, 3, 1)
    w = w4.permute(0, 2, 3, 1).contiguous()
    kw = dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, layout="NHWC")
    im2win.conv2d(xv, w, None, **kw)
    key = cuda.torch_call_key(xv, w, None, (1, 1), (0, 0), (1, 1), 1, "NHWC", "auto", None,
                              None, None)
    tc = cuda.cached_call(key)
    exe, raw = tc.call.exe, torch._C._cuda_getCurrentRawStream
    y = tc(xv, w, None)
    rows = {
        "F.conv2d (channels-last NCHW view)": lambda: torch.nn.functional.conv2d(x, w4),
        "module-like: permute, conv2d, permute": lambda: im2win.conv2d(
            x.permute(0, 2, 3, 1), w, None, **kw).permute(0, 3, 1, 2),
        "im2win.conv2d on the NHWC view": lambda: im2win.conv2d(xv, w, None, **kw),
        "torch_call_key": lambda: cuda.torch_call_key(xv, w, None, (1, 1), (0, 0), (1, 1), 1,
                                                      "NHWC", "auto", None, None, None),
        "cached_call(key)": lambda: cuda.cached_call(key),
        "TorchCall(x, w, None)": lambda: tc(xv, w, None),
        "x.new_empty(y)": lambda: xv.new_empty(tc.call.y_shape),
        "torch.empty(y)": lambda: torch.empty(tc.call.y_shape, device="cuda",
                                              dtype=torch.float16),
        "raw stream": lambda: raw(0),
        "streamIsCapturing": lambda: cupy_capturing(raw(0)),
        "launch_pointers": lambda: exe.launch_pointers(xv.data_ptr(), w.data_ptr(), 0,
                                                       y.data_ptr(), raw(0), None),
        "x.permute": lambda: x.permute(0, 2, 3, 1),
        "x.data_ptr()": lambda: x.data_ptr(),
        "x.stride()": lambda: x.stride(),
        "x.shape": lambda: x.shape,
    }
    for name, fn in rows.items():
        print(f"{name}: {host_us(fn, 200):.2f} us", flush=True)


def cupy_capturing(stream):
    import cupy
    return cupy.cuda.runtime.streamIsCapturing(stream)


def key_of(x, m):
    kw = m.kwargs
    return cuda.torch_call_key(x, m.weight, m.bias, kw["stride"], kw["padding"], kw["dilation"],
                               kw["groups"], kw["layout"], "auto", None, None, None)


if __name__ == "__main__":
    main()
