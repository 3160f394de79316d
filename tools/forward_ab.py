"""ResNet-50 forward passes with im2win's convolutions, the ways a PyTorch tensor can reach
them, against PyTorch's own forward, in one process (`examples/resnet50.py`'s model).

``python3 tools/forward_ab.py [--batch 32] [--rounds 3]`` on the GPU machine. For float16 NHWC
and float32 NCHW, each round times (median of 10 forward passes between CUDA events after a
warm-up, and the host's time to issue one pass, unsynchronised): im2win on the tensors (a call
seen before through `launch.TorchCall`), im2win with that memo off (CuPy views made at every
call by `interop.Door`, then the remembered CuPy call), and PyTorch (cuDNN, TF32 off).
"""

import argparse
import copy
import runpy
import statistics
import time
from pathlib import Path

import torch

from im2win import cuda

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
    args = ap.parse_args()
    example = runpy.run_path(str(ROOT / "examples" / "resnet50.py"))
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    key = cuda.torch_call_key
    for dtype, layout in ((torch.float16, "NHWC"), (torch.float32, "NCHW")):
        memory = torch.channels_last if layout == "NHWC" else torch.contiguous_format
        torch.manual_seed(0)
        ref = example["resnet50"]().eval().to("cuda", dtype).to(memory_format=memory)
        ours = example["swap_convolutions"](copy.deepcopy(ref), layout)
        x = torch.randn(args.batch, 3, 224, 224, device="cuda", dtype=dtype)
        x = x.to(memory_format=memory)
        ways = {"im2win (TorchCall)": (ours, key),
                "im2win (views each call)": (ours, lambda *a, **k: None),
                "PyTorch": (ref, key)}
        with torch.no_grad():
            for rnd in range(args.rounds):
                cells = []
                for name, (model, keyer) in ways.items():
                    cuda.torch_call_key = keyer
                    try:
                        ms = example["timed"](lambda: model(x), "cuda")
                        host = host_ms(lambda: model(x))
                    finally:
                        cuda.torch_call_key = key
                    cells.append(f"{name} {ms:.2f} ms (host {host:.2f})")
                print(f"{dtype} {layout} round {rnd}: " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
