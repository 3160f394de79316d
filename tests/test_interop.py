"""Arrays of other libraries at the door (im2win.interop): CPU ones through NumPy, CUDA ones
zero-copy with the result in the caller's type, mixed kinds refused before any work."""

import numpy as np
import pytest

import im2win
from im2win import interop, reference
from im2win.testing import assert_close


class FakeCuda:
    """Stands for a CUDA array of some library: only the interface is there (a null pointer:
    refused calls must never reach it)."""

    shape, dtype = (1, 3, 8, 8), np.dtype(np.float32)
    __cuda_array_interface__ = {"shape": shape, "typestr": "<f4", "data": (0, False),
                                "version": 3}


def test_mixed_kinds_are_refused_with_what_is_accepted():
    w = np.ones((4, 3, 3, 3), np.float32)
    with pytest.raises(TypeError, match="one kind.*x: test_interop, w: numpy.*PyTorch, JAX"):
        im2win.conv2d(FakeCuda(), w)
    with pytest.raises(TypeError, match="one kind"):
        im2win.conv2d(np.ones((1, 3, 8, 8), np.float32), w, out=FakeCuda())


def test_library_and_device_are_read_off_the_interfaces():
    assert interop.library(np.ones(1)) == "numpy"
    assert interop.on_cuda(FakeCuda()) and not interop.on_cuda(np.ones(1))
    assert interop.gpu_family({"x": np.ones(1), "w": None}) is None


def test_cpu_tensors_of_other_libraries_go_through_numpy():
    torch = pytest.importorskip("torch", reason="needs PyTorch")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 3, 9, 8)), rng.standard_normal((4, 3, 3, 3))
    assert not interop.on_cuda(torch.from_numpy(x))
    y = im2win.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1)
    assert isinstance(y, np.ndarray)
    assert_close(y, reference.conv2d(x, w, padding=1), np.float64, 27)


@pytest.fixture
def torch_cuda():
    torch = pytest.importorskip("torch", reason="needs PyTorch")
    if not (im2win.cuda.is_available() and torch.cuda.is_available()):
        pytest.skip("needs CuPy, PyTorch with CUDA and a visible GPU")
    return torch


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_torch_cuda_in_torch_cuda_out(torch_cuda, layout, dtype):
    torch = torch_cuda
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand((2, 16, 12, 11), device="cuda", generator=gen, dtype=getattr(torch, dtype))
    w = torch.rand((24, 16, 3, 3), device="cuda", generator=gen, dtype=x.dtype)
    b = torch.rand((24,), device="cuda", generator=gen, dtype=x.dtype)
    expected = torch.nn.functional.conv2d(x.double(), w.double(), b.double(), padding=1)
    if layout == "NHWC":
        x, w = x.permute(0, 2, 3, 1), w.permute(0, 2, 3, 1)
        expected = expected.permute(0, 2, 3, 1)
    y = im2win.conv2d(x, w, b, padding=1, layout=layout)
    assert isinstance(y, torch.Tensor) and y.device == x.device and y.dtype == x.dtype
    assert_close(y.double().cpu().numpy(), expected.cpu().numpy(), np.dtype(dtype), 144)
    door = interop.Door("torch")
    assert door.enter(x).data.ptr == x.data_ptr()                 # a view, not a copy
    out = torch.full_like(y, float("nan"))
    assert im2win.conv2d(x, w, b, padding=1, layout=layout, out=out) is out
    assert torch.equal(out, y)


@pytest.mark.gpu
def test_torch_runs_on_the_callers_stream(torch_cuda):
    """Inputs written on a side stream and read at once: only stream order makes it right."""
    torch = torch_cuda
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.empty((4, 32, 64, 64), device="cuda")
        w = torch.empty((64, 32, 3, 3), device="cuda")
        for _ in range(3):                  # keep the stream busy before the values land
            x.uniform_(-1, 1)
            w.uniform_(-1, 1)
        y = im2win.conv2d(x, w)
        ref = torch.nn.functional.conv2d(x.double(), w.double())
    side.synchronize()
    assert_close(y.double().cpu().numpy(), ref.cpu().numpy(), np.float32, 288)


@pytest.mark.gpu
def test_cuda_array_interface_arrays_come_back_as_their_type():
    numba_cuda = pytest.importorskip("numba.cuda", reason="needs Numba")
    if not (im2win.cuda.is_available() and numba_cuda.is_available()):
        pytest.skip("needs Numba's CUDA target and a visible GPU")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    y = im2win.conv2d(numba_cuda.to_device(x), numba_cuda.to_device(w))
    assert interop.library(y) == "numba"
    assert_close(y.copy_to_host(), reference.conv2d(x.astype(np.float64), w.astype(np.float64)),
                 np.float32, 27)
