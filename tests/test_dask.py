"""im2win.dask.conv2d: a Dask array chunked along the batch equals im2win.conv2d bit for bit."""

import numpy as np
import pytest

import im2win
from helpers import random_arrays, to_layout

da = pytest.importorskip("dask.array", reason="needs the dask extra")
import im2win.dask  # noqa: E402

CASES = [((7, 5, 13, 11), (6, 5, 3, 2), dict(padding=1, stride=(2, 1))),
         ((5, 6, 9, 8), (4, 3, 3, 3), dict(groups=2, dilation=2, padding="same"))]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", CASES)
def test_chunked_batch_equals_the_whole_call(rng, layout, x_shape, w_shape, kwargs):
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0], np.float32)
    x, w = to_layout(layout, x, w)
    expected = im2win.conv2d(x, w, b, layout=layout, **kwargs)
    dx = da.from_array(x, chunks=(3,) + x.shape[1:])             # uneven: 3 + 3 + 1 images
    y = im2win.dask.conv2d(dx, w, b, layout=layout, **kwargs)
    assert y.chunks[0] == dx.chunks[0] and y.shape == expected.shape
    assert y.dtype == expected.dtype and isinstance(y._meta, np.ndarray)
    np.testing.assert_array_equal(y.compute(scheduler="threads"), expected)
    graph = dict(y.__dask_graph__())                            # the filter: one key, once
    assert sum(v is w or getattr(v, "value", None) is w for v in graph.values()) == 1


def test_bad_arguments_are_refused_before_any_task(rng):
    x, w, _ = random_arrays(rng, (4, 3, 8, 8), (2, 3, 3, 3), 2, np.float32)
    dx = da.from_array(x, chunks=(2, 3, 8, 8))
    with pytest.raises(ValueError, match="chunked along the batch axis only"):
        im2win.dask.conv2d(da.from_array(x, chunks=(2, 3, 4, 8)), w)
    with pytest.raises(ValueError, match="non-positive stride"):
        im2win.dask.conv2d(dx, w, stride=0)
    with pytest.raises(TypeError, match="same dtype"):
        im2win.dask.conv2d(dx, w.astype(np.float64))
    with pytest.raises(TypeError, match="does not take out"):
        im2win.dask.conv2d(dx, w, out=np.empty((4, 2, 6, 6), np.float32))
    with pytest.raises(TypeError, match="must be a dask.array.Array"):
        im2win.dask.conv2d(x, w)
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        im2win.dask.conv2d(dx[dx[:, 0, 0, 0] > -2], w)


@pytest.mark.gpu
@pytest.mark.skipif(not im2win.cuda.is_available(), reason="needs CuPy and a visible CUDA GPU")
def test_cupy_chunks_equal_the_whole_call(rng):
    import cupy
    x, w, b = random_arrays(rng, (9, 8, 12, 12), (16, 8, 3, 3), 16, np.float16)
    x, w, b = cupy.asarray(x), cupy.asarray(w), cupy.asarray(b)
    dx = da.from_array(x, chunks=(4, 8, 12, 12), asarray=False)
    y = im2win.dask.conv2d(dx, w, b, padding=1)
    assert isinstance(y._meta, cupy.ndarray)
    cupy.testing.assert_array_equal(y.compute(scheduler="threads"),
                                    im2win.conv2d(x, w, b, padding=1))
