"""Arrays of other libraries at the door (im2win.interop): CPU ones through NumPy, CUDA ones
zero-copy with the result in the caller's type, mixed kinds refused before any work."""

import numpy as np
import pytest

import im2win
from im2win import interop, reference
from im2win.cuda import Options
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
        torch.cuda._sleep(50_000_000)       # keep the stream busy before the values land
        for _ in range(3):
            x.uniform_(-1, 1)
            w.uniform_(-1, 1)
        y = im2win.conv2d(x, w)
        ref = torch.nn.functional.conv2d(x.double(), w.double())
    side.synchronize()
    assert_close(y.double().cpu().numpy(), ref.cpu().numpy(), np.float32, 288)


def torch_case(torch, x_shape, w_shape, dtype, layout, seed=0, bias=False, padding=1):
    """x, w, bias or None (PyTorch CUDA tensors, in `layout`; NCHW shapes given) and the
    float64 result."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.rand(x_shape, device="cuda", generator=gen, dtype=dtype) - 0.5
    w = torch.rand(w_shape, device="cuda", generator=gen, dtype=dtype) - 0.5
    b = torch.rand(w_shape[:1], device="cuda", generator=gen, dtype=dtype) if bias else None
    expected = torch.nn.functional.conv2d(x.double(), w.double(),
                                          None if b is None else b.double(), padding=padding)
    if layout == "NHWC":
        x, w = x.permute(0, 2, 3, 1).contiguous(), w.permute(0, 2, 3, 1).contiguous()
        expected = expected.permute(0, 2, 3, 1)
    return x, w, b, expected.cpu().numpy()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, layout, C", [("float16", "NHWC", 16), ("float16", "NHWC", 64),
                                              ("float32", "NCHW", 16), ("float16", "NCHW", 64)])
def test_a_torch_call_seen_before_runs_on_the_tensors(torch_cuda, monkeypatch, dtype, layout,
                                                      C):
    """After the first call of a key, each call goes through its TorchCall (one launch on the
    tensors' pointers where the plan is one kernel, else CuPy views); fresh tensors each call,
    so a TMA plan (64 channels on Hopper) encodes descriptors for new pointers."""
    from im2win import cuda
    from im2win.cuda.launch import TorchCall
    torch = torch_cuda
    kind = getattr(torch, dtype)
    monkeypatch.setattr(cuda, "_calls", {})        # no call of these shapes seen before
    ran, run = [], TorchCall.__call__
    monkeypatch.setattr(TorchCall, "__call__",
                        lambda self, *a: ran.append(self.call.fast) or run(self, *a))
    for seed in range(3):
        x, w, b, expected = torch_case(torch, (2, C, 12, 11), (24, C, 3, 3), kind, layout,
                                       seed, bias=True)
        y = im2win.conv2d(x, w, b, padding=1, layout=layout)
        assert isinstance(y, torch.Tensor) and y.dtype == kind and y.device == x.device
        assert y.shape == expected.shape and y.is_contiguous()
        assert_close(y.double().cpu().numpy(), expected, np.dtype(dtype), 9 * C)
        assert len(ran) == seed                     # the first call was checked in full
    assert ran[0] or layout == "NCHW"       # one kernel into a new y: the pointers' launch


@pytest.mark.gpu
def test_a_remembered_torch_call_keeps_the_callers_stream_and_graphs(torch_cuda):
    """Seen before, a call still runs on the caller's stream (values written there just
    before) and can be captured into a PyTorch CUDA graph whose replays read new inputs."""
    torch = torch_cuda
    x, w, _, _ = torch_case(torch, (4, 64, 16, 16), (64, 64, 3, 3), torch.float16, "NHWC")
    im2win.conv2d(x, w, padding=1, layout="NHWC")            # remembered from here on
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)       # keep the stream busy before the values land
        x.uniform_(-1, 1)
        y = im2win.conv2d(x, w, padding=1, layout="NHWC")
        ref = torch.nn.functional.conv2d(x.permute(0, 3, 1, 2).double(),
                                         w.permute(0, 3, 1, 2).double(), padding=1)
    side.synchronize()
    assert_close(y.double().cpu().numpy(), ref.permute(0, 2, 3, 1).cpu().numpy(), np.float16,
                 576)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = im2win.conv2d(x, w, padding=1, layout="NHWC")
    for _ in range(2):
        x.uniform_(-1, 1)
        y.fill_(float("nan"))
        graph.replay()
        ref = torch.nn.functional.conv2d(x.permute(0, 3, 1, 2).double(),
                                         w.permute(0, 3, 1, 2).double(), padding=1)
        assert_close(y.double().cpu().numpy(), ref.permute(0, 2, 3, 1).cpu().numpy(),
                     np.float16, 576)


@pytest.mark.gpu
@pytest.mark.parametrize("w_shape, padding, algorithm", [((48, 32, 1, 1), 0, "gemm"),
                                                         ((48, 32, 3, 3), 1, "im2win_nhwc")])
def test_a_remembered_torch_call_of_several_launches_runs_on_the_tensors(
        torch_cuda, monkeypatch, w_shape, padding, algorithm):
    """A remembered call that is not one launch (cuBLAS's GEMM; the channels-last twin's
    copies of x and w around its kernel: x not read in place, else only w is copied and the
    call goes by pointers) runs on views of the tensors and of a y from PyTorch's allocator
    (TorchCall._run), on the caller's stream, and inside a PyTorch CUDA graph (its scratch
    then the graph's own memory)."""
    from im2win import cuda
    from im2win.cuda.launch import TorchCall
    torch = torch_cuda
    monkeypatch.setattr(cuda, "_calls", {})
    ran, run = [], TorchCall._run
    monkeypatch.setattr(TorchCall, "_run", lambda self, *a: ran.append(
        self.call.exe.plan.algorithm) or run(self, *a))
    x, w, b, _ = torch_case(torch, (2, 32, 12, 11), w_shape, torch.float32, "NCHW", bias=True,
                            padding=padding)
    kw = dict(padding=padding, algorithm=algorithm, options=Options(x_in_place=False))
    im2win.conv2d(x, w, b, **kw)                              # remembered from here on

    def expected():
        return torch.nn.functional.conv2d(x.double(), w.double(), b.double(),
                                          padding=padding).cpu().numpy()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)       # keep the stream busy before the values land
        x.uniform_(-1, 1)
        y = im2win.conv2d(x, w, b, **kw)
    side.synchronize()
    assert ran == [algorithm] and isinstance(y, torch.Tensor) and y.is_contiguous()
    assert_close(y.double().cpu().numpy(), expected(), np.float32, 9 * 32)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = im2win.conv2d(x, w, b, **kw)
    for _ in range(2):
        x.uniform_(-1, 1)
        y.fill_(float("nan"))
        graph.replay()
        assert_close(y.double().cpu().numpy(), expected(), np.float32, 9 * 32)


@pytest.mark.gpu
@pytest.mark.parametrize("w_shape", [(256, 64, 1, 1), (64, 64, 1, 1)])
def test_inside_a_torch_graph_16_bit_1x1_layers_run_as_cublas_gemms(torch_cuda, monkeypatch,
                                                                    w_shape):
    """A float16 NHWC 1x1 layer that "auto" runs on the Tensor-Core kernel (256 filters) or
    pointwise.cu (64) runs as cuBLAS's GEMM inside a PyTorch CUDA graph capture
    (plan.graph_plan: there only GPU time is replayed); eagerly, before and after, the
    kernel. Both match float64."""
    from im2win import cuda
    from im2win.cuda.launch import TorchCall
    torch = torch_cuda
    monkeypatch.setattr(cuda, "_calls", {})
    ran, run = [], TorchCall._run
    monkeypatch.setattr(TorchCall, "_run", lambda self, exe, *a: ran.append(
        exe.plan.algorithm) or run(self, exe, *a))
    x, w, b, _ = torch_case(torch, (2, 64, 12, 11), w_shape, torch.float16, "NHWC", bias=True,
                            padding=0)

    def check(y):
        ref = torch.nn.functional.conv2d(x.permute(0, 3, 1, 2).double(),
                                         w.permute(0, 3, 1, 2).double(), b.double())
        assert_close(y.double().cpu().numpy(), ref.permute(0, 2, 3, 1).cpu().numpy(),
                     np.float16, 64)
    check(im2win.conv2d(x, w, b, layout="NHWC"))
    (call,) = [c for c in cuda._calls.values() if isinstance(c, TorchCall)]
    assert call.call.exe.plan.algorithm in ("im2win_fused", "pointwise")
    assert call.call.graph.plan.algorithm == "gemm"
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = im2win.conv2d(x, w, b, layout="NHWC")
    assert ran == ["gemm"]
    for _ in range(2):
        x.uniform_(-1, 1)
        y.fill_(float("nan"))
        graph.replay()
        check(y)
    check(im2win.conv2d(x, w, b, layout="NHWC"))
    assert ran == ["gemm"]                  # eagerly the kernel again


@pytest.mark.gpu
def test_torch_tensors_not_read_as_they_lie_are_refused(torch_cuda):
    torch = torch_cuda
    x, w, _, _ = torch_case(torch, (1, 8, 6, 6), (4, 8, 3, 3), torch.float32, "NCHW")
    im2win.conv2d(x, w, padding=1)
    with pytest.raises(TypeError, match="does not record autograd"):
        im2win.conv2d(x, w.clone().requires_grad_(), padding=1)
    # a view whose values are the negated memory (the negative bit), of w's shape
    negated = torch.complex(torch.zeros_like(w), -w).conj().imag
    assert negated.is_neg() and torch.equal(negated, w)
    with pytest.raises(TypeError, match="negative or conjugate bit"):
        im2win.conv2d(x, negated, padding=1)


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
