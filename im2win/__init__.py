"""im2win: fast, memory-lean 2-D convolution by the im2win (image to window) method.

``im2win.conv2d(x, w, ...)`` convolves NumPy arrays on the CPU and CuPy arrays on the GPU;
``im2win.conv2d_backward_data`` and ``conv2d_backward_filter`` are its gradients (on the GPU as
forward convolutions, ``im2win.gradients``);
``im2win.reference`` is the exact NumPy specification every path is tested against. Importing
this package never needs CuPy or a GPU.
"""

from im2win.api import conv2d, conv2d_backward_data, conv2d_backward_filter
from im2win.problem import Problem

__all__ = ["conv2d", "conv2d_backward_data", "conv2d_backward_filter", "Problem"]
__version__ = "0.1.0"
