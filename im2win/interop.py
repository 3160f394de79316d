"""GPU arrays of other libraries at the door: PyTorch, JAX, Numba and anything with `__dlpack__`
or `__cuda_array_interface__` on a CUDA device.

`gpu_family` says whether a call's arrays are such foreign GPU arrays (and of which library);
`Door` turns them into CuPy views of the same memory (zero-copy), runs the call on the caller's
current stream (PyTorch's `torch.cuda.current_stream()`; CuPy's own otherwise), and gives the
result back as the caller's array type. CPU arrays of any library are not foreign here: NumPy's
conversion takes them, as before. Nothing in the paths below knows about other libraries.
"""

from __future__ import annotations

import contextlib
import sys

import numpy as np

# DLPack device types of CUDA memory (dlpack.h: kDLCUDA, kDLCUDAHost is host memory, kDLCUDAManaged)
DLPACK_CUDA = (2, 13)
ACCEPTED = ("NumPy arrays or array-likes (CPU), CuPy arrays, or CUDA arrays of one other library "
            "with __dlpack__ or __cuda_array_interface__ (PyTorch, JAX, Numba)")


def library(a) -> str:
    """The top-level module of a's type ('torch', 'jax', 'numba', 'cupy', 'numpy', ...)."""
    top = type(a).__module__.split(".")[0]
    return "jax" if top == "jaxlib" else top


def on_cuda(a) -> bool:
    """Whether `a` (not a CuPy array) is a CUDA array another library exposes."""
    try:
        if hasattr(a, "__cuda_array_interface__"):
            return True
    except Exception:          # PyTorch refuses it for a tensor that requires grad
        pass
    device = getattr(a, "__dlpack_device__", None)
    if device is None or not hasattr(a, "__dlpack__"):
        return False
    try:
        return device()[0] in DLPACK_CUDA
    except Exception:          # a CPU-only producer may refuse the question: not on the GPU
        return False


def gpu_family(named: dict) -> str | None:
    """The library of the foreign CUDA arrays among `named` (name -> array or None), or None
    when there are none; raise TypeError when they mix with other kinds of array."""
    given = {k: a for k, a in named.items() if a is not None}
    cupy = sys.modules.get("cupy")
    foreign = {k: library(a) for k, a in given.items()
               if not (cupy is not None and isinstance(a, cupy.ndarray)) and on_cuda(a)}
    if not foreign:
        return None
    families = set(foreign.values())
    if len(families) > 1 or len(foreign) < len(given):
        kinds = ", ".join(f"{k}: {foreign.get(k, library(a))}" for k, a in given.items())
        raise TypeError(f"all arrays must be of one kind, got {kinds}; accepted: {ACCEPTED}")
    return families.pop()


_TORCH_DTYPES: dict = {}     # torch dtype -> NumPy dtype, the real types im2win takes


def cupy_view(t):
    """A CuPy array over the memory of the PyTorch CUDA tensor t (its shape, strides and
    dtype; it keeps t alive), made directly: `cupy.from_dlpack` of a tensor took 23 us of host
    time on the H200's host, where an ndarray over given memory takes 3. Through DLPack for what it does not cover (dtypes
    other than float16, bfloat16, float32 and float64; tensors that are not strided). A tensor
    that requires grad is refused (TypeError), as DLPack refuses it: the result would not
    carry a gradient; so is one with its negative or conjugate bit set (its values are not
    what its memory holds)."""
    import cupy
    import torch
    if not _TORCH_DTYPES:
        import ml_dtypes
        _TORCH_DTYPES.update({torch.float16: np.dtype(np.float16),
                              torch.bfloat16: np.dtype(ml_dtypes.bfloat16),
                              torch.float32: np.dtype(np.float32),
                              torch.float64: np.dtype(np.float64)})
    if t.requires_grad:
        raise TypeError("im2win.conv2d does not record autograd: pass tensors that do not "
                        "require grad (tensor.detach(), or torch.no_grad() for results)")
    if t.is_neg() or t.is_conj():
        raise TypeError("a tensor with its negative or conjugate bit set is not read as it "
                        "lies: pass tensor.resolve_neg() (or resolve_conj())")
    dtype = _TORCH_DTYPES.get(t.dtype)
    if dtype is None or t.layout is not torch.strided:
        return cupy.from_dlpack(t)
    size = dtype.itemsize
    nbytes = 0 if t.numel() == 0 else \
        (sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) * size
    memory = cupy.cuda.UnownedMemory(t.data_ptr(), nbytes, t, t.get_device())
    return cupy.ndarray(tuple(t.shape), dtype, cupy.cuda.MemoryPointer(memory, 0),
                        tuple(s * size for s in t.stride()))


class Door:
    """Foreign CUDA arrays of one library in, CuPy views out, and the way back."""

    def __init__(self, family: str):
        try:
            import cupy
        except ImportError as err:
            raise TypeError(f"{family} CUDA arrays need CuPy (pip install cupy-cuda13x); "
                            f"accepted without it: NumPy arrays or array-likes") from err
        self.cupy, self.family = cupy, family

    def enter(self, a):
        """A CuPy array viewing a's memory (no copy), or None for None."""
        if a is None:
            return None
        if self.family == "torch":
            return cupy_view(a)
        if hasattr(a, "__dlpack__"):
            return self.cupy.from_dlpack(a)
        return self.cupy.asarray(a)        # __cuda_array_interface__: a view as well

    def stream(self, a):
        """The context in which kernels run: the caller's current stream."""
        if self.family == "torch":
            import torch
            current = torch.cuda.current_stream(a.device)
            if hasattr(current, "__cuda_stream__"):   # the CUDA stream protocol (PyTorch 2.5+)
                return self.cupy.cuda.Stream.from_external(current)
            return self.cupy.cuda.ExternalStream(current.cuda_stream, current.device.index)
        return contextlib.nullcontext()

    def leave(self, y, out=None):
        """The result as the caller's array type: `out` itself when given, else a view of y."""
        if out is not None:
            return out
        if self.family == "torch":
            import torch
            return torch.from_dlpack(y)
        if self.family == "jax":
            import jax.numpy as jnp
            return jnp.from_dlpack(y)
        if self.family == "numba":
            from numba import cuda
            return cuda.as_cuda_array(y)
        return y                            # another producer: the CuPy array itself


def call(fn, family: str, x, w, bias, out, torch_key=None, **kwargs):
    """fn(x, w, bias, out=out, **kwargs) on CuPy views of foreign CUDA arrays, on the caller's
    stream; the result in the caller's array type. `torch_key` (PyTorch tensors: their
    `cuda.torch_call_key`): remember the Call made for the views under it, so that the next
    call of that key runs on the tensors directly (`launch.TorchCall`)."""
    door = Door(family)
    args = [door.enter(a) for a in (x, w, bias, out)]
    device = args[0].device
    with device, door.stream(x):
        y = fn(*args[:3], out=args[3], **kwargs)
        if torch_key is not None:
            from im2win import cuda
            names = ("stride", "padding", "dilation", "groups", "layout", "algorithm",
                     "options", "workspace_limit", "precision")
            cuda.remember_torch_call(torch_key, cuda.cached_call(cuda.call_key(
                *args, *(kwargs[n] for n in names))))
        # inside the stream's context: y's producer and consumer streams are then one, and
        # DLPack makes no event (which a graph capture would not take)
        return door.leave(y, out)
