"""`im2win.dask.conv2d`: im2win.conv2d over a Dask array chunked along the batch, for batches
larger than one device (or one host's memory), one `im2win.conv2d` per chunk.

Needs the optional ``dask`` extra (``pip install "im2win[dask]"``); `import im2win` does not
import Dask.
"""

from __future__ import annotations

import sys

import numpy as np

from im2win.api import conv2d as _conv2d

_NOT_HERE = ("out",)


def conv2d(x, w, bias=None, **kwargs):
    """Convolve a Dask array chunked along its batch axis, chunk by chunk with im2win.conv2d.

    Every image's result is independent of the others in its call, so the computed value is
    bit for bit ``im2win.conv2d`` of the whole array. The filter and bias enter the task graph
    once (one key each), however many chunks there are.

    Args:
        x: a ``dask.array.Array`` of the shape ``im2win.conv2d`` takes for `layout`, NumPy- or
            CuPy-backed, chunked along axis 0 (the batch) only, with known chunk sizes.
        w: the filter, a NumPy or CuPy array like x's chunks.
        bias: None or (K,), like w.
        **kwargs: ``im2win.conv2d``'s keyword arguments (stride, padding, dilation, groups,
            layout, algorithm, options, workspace_limit, precision), except `out`.

    Returns:
        A ``dask.array.Array`` y, chunked along the batch as x is: (N, K, P, Q) for "NCHW",
        (N, P, Q, K) for "NHWC". Nothing is computed until it is.

    Raises:
        TypeError: x is not a Dask array, or `out` was given; what ``im2win.conv2d`` raises
            for bad types (checked on an empty batch, before any task is built).
        ValueError: x chunked along another axis, or of unknown chunk sizes; what
            ``im2win.conv2d`` raises for bad values.

    Example:
        >>> import dask.array as da, numpy as np, im2win.dask
        >>> x = da.ones((10, 3, 8, 8), np.float32, chunks=(4, 3, 8, 8))
        >>> y = im2win.dask.conv2d(x, np.ones((4, 3, 3, 3), np.float32), padding=1)
        >>> y.chunks[0], y.shape
        ((4, 4, 2), (10, 4, 8, 8))
    """
    import dask
    import dask.array as da

    if not isinstance(x, da.Array):
        raise TypeError(f"x must be a dask.array.Array, got {type(x).__name__}; use "
                        f"im2win.conv2d for NumPy and CuPy arrays")
    given = [name for name in _NOT_HERE if name in kwargs]
    if given:
        raise TypeError(f"im2win.dask.conv2d does not take {', '.join(given)}: its result is a "
                        f"new Dask array")
    if any(n != n for n in x.shape):                       # NaN: chunk sizes not known yet
        raise ValueError("x has unknown chunk sizes; call x.compute_chunk_sizes() first")
    if x.ndim == 4 and any(len(c) > 1 for c in x.chunks[1:]):
        raise ValueError(f"x must be chunked along the batch axis only, got chunks "
                         f"{tuple(tuple(c) for c in x.chunks)}; rechunk with "
                         f"x.rechunk({{1: -1, 2: -1, 3: -1}})")
    # The whole validation of im2win.conv2d, on an empty batch of x's kind: no work, no launch.
    xp = sys.modules["cupy"] if type(x._meta).__module__.startswith("cupy") else np
    empty = _conv2d(xp.empty((0,) + tuple(x.shape[1:]), x.dtype), w, bias, **kwargs)

    def convolve(block, w, bias):
        return _conv2d(block, w, bias, **kwargs)

    chunks = (x.chunks[0],) + tuple((n,) for n in empty.shape[1:])
    return da.map_blocks(convolve, x, dask.delayed(w),
                         None if bias is None else dask.delayed(bias),
                         chunks=chunks, dtype=empty.dtype, meta=empty)
