"""A ResNet-50 forward pass with every convolution computed by im2win.

``python examples/resnet50.py [--batch 32] [--device cuda|cpu] [--dtype float32|float16]``

Each ``torch.nn.Conv2d`` of the network (random weights) is swapped for one that hands its
tensors to ``im2win.conv2d`` (CUDA tensors without a copy, the result a tensor; CPU tensors
through NumPy); float16 runs channels-last (NHWC), im2win's and cuDNN's fast layout there.
The script checks the output against PyTorch's own forward pass
(cuDNN on the GPU, TF32 off) and times both, CUDA events after warm-up. The network is
torchvision's ``resnet50`` where torchvision is installed, else the same architecture built
here (`resnet50`: torchvision's v1.5 layers and initialisation). Needs torch (and CuPy for
the GPU).
"""

import argparse
import copy
import statistics
import time

import numpy as np
import torch

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
        # x is NCHW, or an NCHW view of channels-last memory: hand im2win the NHWC tensor.
        # CUDA tensors run on the GPU without a copy and come back as a tensor (a call seen
        # before goes straight to its kernel); CPU tensors run through NumPy.
        x = x.permute(0, 2, 3, 1) if self.layout == "NHWC" else x.contiguous()
        y = im2win.conv2d(x, self.weight, self.bias, **self.kwargs)
        y = y if isinstance(y, torch.Tensor) else torch.from_numpy(y)
        return y.permute(0, 3, 1, 2) if self.layout == "NHWC" else y


class Bottleneck(torch.nn.Module):
    """torchvision's ResNet-50 block (v1.5: the stride in the 3x3 convolution)."""

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        nn, cout = torch.nn, 4 * width
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


def resnet50() -> torch.nn.Module:
    """ResNet-50 with random weights: torchvision's, or where torchvision is missing the same
    layers (stem, 3-4-6-3 bottlenecks, classifier) and initialisation built here."""
    try:
        import torchvision
        return torchvision.models.resnet50(weights=None)
    except Exception:                   # not installed, or a torch it was not built for
        pass
    nn = torch.nn
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = 4 * width
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000))
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    return model


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
    reference = resnet50().eval().to(args.device, dtype)
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
