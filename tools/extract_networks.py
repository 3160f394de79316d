"""Regenerate im2win/networks.py's data: every convolution of five torchvision networks, counted.

``python3 tools/extract_networks.py`` (needs torch and torchvision; the output does not). Each
network runs once on a 1x3x224x224 input with random weights; a forward hook on every
torch.nn.Conv2d records its input's C, H, W and the layer's K, R, S, stride, padding, dilation,
groups and bias. Identical convolutions are one entry with the number of times they occur.
The module's code above its NETWORKS literal is kept as it is.
"""

import collections
import pathlib
import re

import torch
import torchvision

NETWORKS = {"resnet50": torchvision.models.resnet50,
            "mobilenet_v2": torchvision.models.mobilenet_v2,
            "efficientnet_b0": torchvision.models.efficientnet_b0,
            "convnext_tiny": torchvision.models.convnext_tiny,
            "resnext50_32x4d": torchvision.models.resnext50_32x4d}
OUT = pathlib.Path(__file__).resolve().parents[1] / "im2win" / "networks.py"

MARK = "NETWORKS = {"


def convolutions(build):
    model = build(weights=None).eval()
    seen = collections.OrderedDict()

    def hook(module, inputs, _):
        _, C, H, W = inputs[0].shape
        key = (C, H, W, module.out_channels, *module.kernel_size, tuple(module.stride),
               tuple(module.padding), tuple(module.dilation), module.groups,
               module.bias is not None)
        seen[key] = seen.get(key, 0) + 1
    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d):
            m.register_forward_hook(hook)
    with torch.no_grad():
        model(torch.randn(1, 3, 224, 224))
    return seen


def main():
    """Replace the data part of im2win/networks.py (from MARK on), keep the code above it."""
    head = OUT.read_text().split(MARK)[0]
    head = re.sub(r"\(torchvision [^,]+,", f"(torchvision {torchvision.__version__},", head)
    lines = [head + MARK]
    for net, build in NETWORKS.items():
        lines.append(f'    "{net}": (')
        for i, (key, count) in enumerate(convolutions(build).items()):
            C, H, W, K, R, S, stride, padding, dilation, groups, bias = key
            lines.append(f'        NetConv("{net}.{i}", {C}, {H}, {W}, {K}, {R}, {S}, {stride}, '
                         f'{padding}, {dilation}, {groups}, {bias}, {count}),')
        lines.append("    ),")
    lines.append("}\n")
    OUT.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
