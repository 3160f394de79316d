"""A torchvision ResNet-50 forward pass with every convolution computed by im2win.

``python examples/resnet50.py [--batch 32] [--device cuda|cpu] [--dtype float32|float16]``

Each ``torch.nn.Conv2d`` of the network (random weights) is swapped for one that hands its
tensors to ``im2win.conv2d`` without a copy (DLPack: CuPy arrays on the GPU, NumPy arrays on
the CPU) and hands the result back the same way; float16 runs channels-last (NHWC), im2win's
and cuDNN's fast layout there. The script checks the output against PyTorch's own forward pass
(cuDNN on the GPU, TF32 off) and times both, CUDA events after warm-up. Needs torch and
torchvision (and CuPy for the GPU).
"""

import argparse
import copy
import statistics
import time

import numpy as np
import torch
import torchvision

import im2win


class Im2winConv2d(torch.nn.Module):
    """A torch.nn.Conv2d's weights and hyper-parameters, computed by im2win.conv2d."""

    def __init__(self, conv: torch.nn.Conv2d, layout: str):
        super().__init__()
        self.layout = layout
        weight = conv.weight.detach()
        self.weight = (weight.permute(0, 2, 3, 1) if layout == "NHWC" else weight).contiguous()
        self.bias = None if conv.bias is None else conv.bias.detach().contiguous()
        self.kwargs = dict(stride=conv.stride, padding=conv.padding, dilation=conv.dilation,
                           groups=conv.groups, layout=layout)

    def forward(self, x):
        # x is NCHW, or an NCHW view of channels-last memory: hand im2win the NHWC array.
        x = x.permute(0, 2, 3, 1) if self.layout == "NHWC" else x.contiguous()
        if x.is_cuda:
            import cupy
            y = torch.from_dlpack(im2win.conv2d(*(None if t is None else cupy.from_dlpack(t)
                                                  for t in (x, self.weight, self.bias)),
                                                **self.kwargs))
        else:
            y = torch.from_numpy(im2win.conv2d(*(None if t is None else t.numpy()
                                                 for t in (x, self.weight, self.bias)),
                                               **self.kwargs))
        return y.permute(0, 3, 1, 2) if self.layout == "NHWC" else y


def swap_convolutions(model: torch.nn.Module, layout: str) -> torch.nn.Module:
    for name, child in model.named_children():
        if isinstance(child, torch.nn.Conv2d):
            setattr(model, name, Im2winConv2d(child, layout))
        else:
            swap_convolutions(child, layout)
    return model


def timed(fn, device, repeats=10):
    """Median milliseconds of fn() after a warm-up call (CUDA events on the GPU)."""
    fn()
    runs = []
    for _ in range(repeats):
        if device == "cuda":
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            runs.append(start.elapsed_time(stop))
        else:
            t0 = time.perf_counter()
            fn()
            runs.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(runs)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16"])
    args = parser.parse_args(argv)
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dtype = getattr(torch, args.dtype)
    layout = "NHWC" if args.dtype == "float16" else "NCHW"
    torch.manual_seed(0)
    memory = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    reference = torchvision.models.resnet50(weights=None).eval().to(args.device, dtype)
    reference = reference.to(memory_format=memory)
    ours = swap_convolutions(copy.deepcopy(reference), layout)     # the same weights
    x = torch.randn(args.batch, 3, 224, 224, device=args.device, dtype=dtype)
    x = x.to(memory_format=memory)
    with torch.no_grad():
        expected, got = reference(x), ours(x)
        error = float((got.double() - expected.double()).norm() / expected.double().norm())
        ms_ref = timed(lambda: reference(x), args.device)
        ms_ours = timed(lambda: ours(x), args.device)
    print(f"ResNet-50 forward, batch {args.batch}, {args.dtype} {layout} on {args.device}: "
          f"im2win convolutions {ms_ours:.2f} ms, PyTorch {ms_ref:.2f} ms "
          f"({ms_ref / ms_ours:.2f}x); relative error {error:.1e}")
    return 0 if np.isfinite(error) and error < (3e-2 if args.dtype == "float16" else 1e-4) \
        else 1


if __name__ == "__main__":
    raise SystemExit(main())
