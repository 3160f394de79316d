"""im2win.conv2d on CuPy arrays. Skipped, with the reason, where no GPU is visible."""

import numpy as np
import pytest

import im2win

pytestmark = pytest.mark.gpu


def test_cupy_input_is_refused_until_the_gpu_path_lands():
    import cupy
    x, w = cupy.ones((1, 2, 5, 5), cupy.float32), cupy.ones((3, 2, 3, 3), cupy.float32)
    with pytest.raises(NotImplementedError, match="GPU path"):
        im2win.conv2d(x, w)
    with pytest.raises(ValueError, match="non-positive stride"):     # still checked first
        im2win.conv2d(x, w, stride=0)


def test_numpy_and_cupy_arrays_cannot_be_mixed():
    import cupy
    with pytest.raises(TypeError, match="all arrays must be on one device"):
        im2win.conv2d(np.ones((1, 2, 5, 5), np.float32), cupy.ones((3, 2, 3, 3), cupy.float32))
    with pytest.raises(TypeError, match="all arrays must be on one device"):
        im2win.conv2d(cupy.ones((1, 2, 5, 5), cupy.float32), cupy.ones((3, 2, 3, 3),
                      cupy.float32), out=np.empty((1, 3, 3, 3), np.float32))
