"""Where a cached im2win call's host time goes, stage by stage, against cuDNN's.

``python3 tools/host_probe.py [DTYPE LAYOUT] [LAYER ...]`` on the GPU machine (default float16
NHWC and a few network layers). For each layer: host microseconds per call of each stage of
`im2win.conv2d`'s cached path, issued without waiting (200 calls, median of 5 runs): the whole
call, its key, the remembered Call, the Executable alone (y made once), the bare
cuLaunchKernel, CuPy's output allocation; then single calls between CUDA events of the whole
call (on one x, and cycling through `bench.rotation`'s copies as `python -m im2win --suite`
does), of the same call with y's array made before the launch (`launch.Call.fast` off: for
split-K also its partial sums from a Scratch; its host time too), of
the bare launch and of cuDNN (one x, and rotated), and cuDNN's host time; then, in the
suite's order, the rotated call after half a second of host work (the reference's), cuDNN
next, and the call again. A cProfile of the whole call closes each layer when --profile is
given.
"""

import cProfile
import pstats
import statistics
import sys
import time

import cupy
import numpy as np

import im2win
from im2win import bench, cuda
from im2win.bench import GPU, SUITE_BATCH, bind, prepare, rotation
from im2win.cuda import launch
from im2win.networks import NETWORKS

LAYERS = ["resnet50.13", "mobilenet_v2.11", "efficientnet_b0.37", "efficientnet_b0.43",
          "resnext50_32x4d.13"]
CALLS = 200


def host_us(device, fn) -> float:
    """Median over 5 runs of host microseconds per call of fn(), CALLS calls unsynchronised
    (`bench.GPU.host_time`)."""
    return statistics.median(device.host_time(fn, CALLS) for _ in range(5)) * 1e6


def main():
    args = sys.argv[1:]
    profile = "--profile" in args
    args = [a for a in args if a != "--profile"]
    dtype, layout = (args[0], args[1]) if len(args) >= 2 else ("float16", "NHWC")
    names = args[2:] or LAYERS
    device = GPU()
    have_torch = bench.torch_cuda_available()
    convs = {c.name: c for net in NETWORKS.values() for c in net}
    rows = []
    for name in names:
        conv = convs[name]
        prob, _, _, x, w = prepare(conv, SUITE_BATCH["gpu"], dtype, layout, device)
        kw = dict(layout=layout, **conv.kwargs)
        y = im2win.conv2d(x, w, **kw)
        key = cuda.call_key(x, w, None, None, kw.get("stride", 1), kw.get("padding", 0),
                            kw.get("dilation", 1), kw.get("groups", 1), layout, "auto", None,
                            None, None)
        call = cuda.cached_call(key)
        exe = call.exe if call is not None else None
        stages = {"api": lambda: im2win.conv2d(x, w, **kw)}
        if call is not None:
            stages["key"] = lambda: cuda.call_key(
                x, w, None, None, kw.get("stride", 1), kw.get("padding", 0),
                kw.get("dilation", 1), kw.get("groups", 1), layout, "auto", None, None, None)
            stages["Call"] = lambda: call(x, w, None, None)
            stages["Scratch"] = launch.Scratch
            stages["exe"] = lambda: exe(x, w, None, y, launch.Scratch())
            stages["empty"] = lambda: cupy.empty(prob.y_shape, prob.dtype)
            if exe.launches and exe.plan.algorithm in ("im2win_fused", "depthwise", "narrow"):
                _, params, ats, _, _ = exe._argument_buffers()
                stream = cupy.cuda.get_current_stream().ptr
                grid = exe.launches[0][2]

                def bare():
                    cupy.cuda.driver.launchKernel(exe.function_ptr, *grid, *exe.block,
                                                  exe.smem, stream, ats[0], 0)
                exe(x, w, None, y, launch.Scratch())     # its buffers hold these pointers
                stages["launch"] = bare
        host = {k: host_us(device, f) for k, f in stages.items()}
        single = {"api": device.time(lambda: im2win.conv2d(x, w, **kw)) * 1e6}
        if "launch" in stages:
            single["launch"] = device.time(stages["launch"]) * 1e6
        inputs = rotation(x, device)
        rotated, _ = bind(im2win.conv2d, inputs, w, layout, conv.kwargs)
        single["api rotated"] = device.time(rotated) * 1e6
        if call is not None and call.fast:      # the same call with y's array made first
            call.fast = False
            single["api array first"] = device.time(lambda: im2win.conv2d(x, w, **kw)) * 1e6
            host["api array first"] = host_us(device, lambda: im2win.conv2d(x, w, **kw))
            call.fast = True
        if have_torch:
            call_t, _ = bind(bench.CUDNN, [x], w, layout, conv.kwargs)
            single["cudnn"] = device.time(call_t) * 1e6
            host["torch"] = host_us(device, call_t)
            call_t, _ = bind(bench.CUDNN, inputs, w, layout, conv.kwargs)
            single["cudnn rotated"] = device.time(call_t) * 1e6
        if have_torch:          # the suite's order: host work (the reference), then each
            busy = np.random.default_rng(0).random((1500, 1500))
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < 0.5:
                busy @ busy
            single["api after idle"] = device.time(rotated) * 1e6
            single["cudnn next"] = device.time(call_t) * 1e6
            single["api again"] = device.time(rotated) * 1e6
        del inputs
        plan = exe.plan.algorithm + ":" + (exe.plan.kernel or "-")[:60] if exe else "?"
        print(f"{name}: {plan}")
        print("  host us: " + ", ".join(f"{k} {v:.1f}" for k, v in host.items()))
        print("  single us: " + ", ".join(f"{k} {v:.1f}" for k, v in single.items()),
              flush=True)
        rows.append((name, host, single))
        if profile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(2000):
                im2win.conv2d(x, w, **kw)
            prof.disable()
            device.sync()
            pstats.Stats(prof).sort_stats("tottime").print_stats(14)
        del x, w, y
        cupy.get_default_memory_pool().free_all_blocks()
    keys = list(dict.fromkeys(k for _, h, _ in rows for k in h))
    singles = list(dict.fromkeys(k for _, _, s in rows for k in s))
    print("\nlayer | " + " | ".join(f"host {k}" for k in keys) + " | " +
          " | ".join(f"single {k}" for k in singles))
    for name, host, single in rows:
        print(name + " | " + " | ".join(f"{host.get(k, float('nan')):.1f}" for k in keys) +
              " | " + " | ".join(f"{single.get(k, float('nan')):.1f}" for k in singles))


if __name__ == "__main__":
    main()
