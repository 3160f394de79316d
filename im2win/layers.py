"""The twelve benchmark layers of the im2win GPU paper's code (``spec/im2win.md``).

All are unpadded, undilated, ungrouped, with one stride for both axes; the paper's batch is 128.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Layer:
    """One benchmark convolution: C x H x W input, K x R x S filter, stride."""

    name: str
    C: int
    H: int
    W: int
    K: int
    R: int
    S: int
    stride: int

    def shapes(self, batch: int, layout: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Return (x shape, w shape) for `batch` images in `layout`."""
        if layout == "NCHW":
            return (batch, self.C, self.H, self.W), (self.K, self.C, self.R, self.S)
        return (batch, self.H, self.W, self.C), (self.K, self.R, self.S, self.C)

    @property
    def kwargs(self) -> dict:
        """The hyper-parameters as im2win.conv2d takes them (im2win.networks.NetConv alike)."""
        return dict(stride=self.stride)


LAYERS = {layer.name: layer for layer in (
    Layer("cv1", 3, 227, 227, 96, 11, 11, 4),
    Layer("cv2", 3, 231, 231, 96, 11, 11, 4),
    Layer("cv3", 3, 227, 227, 64, 7, 7, 2),
    Layer("cv4", 32, 224, 224, 64, 7, 7, 2),
    Layer("cv5", 96, 24, 24, 256, 5, 5, 1),
    Layer("cv6", 256, 12, 12, 512, 3, 3, 1),
    Layer("cv7", 3, 224, 224, 64, 3, 3, 1),
    Layer("cv8", 64, 112, 112, 128, 3, 3, 1),
    Layer("cv9", 64, 56, 56, 64, 3, 3, 1),
    Layer("cv10", 128, 28, 28, 128, 3, 3, 1),
    Layer("cv11", 256, 14, 14, 256, 3, 3, 1),
    Layer("cv12", 512, 7, 7, 512, 3, 3, 1),
)}
