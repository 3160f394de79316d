"""im2win.conv2d and its baselines on the twelve benchmark layers, for airspeed velocity.

Two classes, one parameter grid each (layer, dtype, layout, implementation), and two more for
whole networks and for the host's cost of a call:

* `Conv2dGPU`: batch 128, float32, float16 and bfloat16 (no im2col_gemm: CuPy's matmul has
  none; skipped on commits without bfloat16), NCHW and NHWC, and six implementations: the
  planner's default (``algorithm="auto"``), each GPU algorithm forced (``im2win_fused``,
  ``im2win`` materialised, ``direct``, ``im2col_gemm``) and cuDNN through PyTorch. Without a
  GPU (or without PyTorch with CUDA, for cuDNN) `setup` raises NotImplementedError: asv
  reports the case as skipped.
* `Conv2dCPU`: batch 8 (`bench.CPU_BATCH`), float32, the default and im2col_gemm.
* `PrecisionGPU`: float32 at each `precision` ("float32", "3xtf32", "tf32"), the default,
  batch 128, NCHW and NHWC.
* `NetworksGPU`: `track_speedup_vs_cudnn` per network of `im2win.networks` and dtype (float32
  NCHW, float16 NHWC), batch 32: cuDNN's total time over im2win's, each convolution weighted by
  how often the network runs it.
* `GradientsGPU`: `track_tflops` of both gradients (``--op``), the twelve layers, float32 and
  float16 NHWC, batch 128, im2win and cuDNN.
* `HostTimeGPU`: `track_host_us`, microseconds of host time per cached call of a tiny
  convolution (issuing it; the GPU runs behind), im2win and PyTorch
  (``python -m im2win overhead``).

Each benchmark: `time_conv2d` (one call, synchronised), `track_tflops` (2*N*K*P*Q*(C/G)*R*S
over the median of CUDA-event or host timings after warm-up) and `track_extra_memory` (peak
bytes one call allocates beyond its output). Timing and memory come from `im2win.bench`, as
``python -m im2win``.

asv runs every (benchmark, parameter set) in a fresh process, so nothing made in `setup` is
shared between them; `setup` is kept cheap instead: GPU inputs are drawn on the device (a
host draw of cv4 in float32 is 205M random numbers in every process), and with
``IM2WIN_ASV_PREIMPORT=1`` (set by tools/asv_gpu.sh with ``--launch-method forkserver``) CuPy
and PyTorch are imported once, by the fork server, without touching the GPU.

The suite uses only what `im2win.bench` has had since commit 0eab6ef, so it can record older
commits too (tools/asv_gpu.sh).
"""

import itertools
import os

from im2win import bench
from im2win.api import conv2d
from im2win.layers import LAYERS
from im2win.problem import make_problem

if os.environ.get("IM2WIN_ASV_PREIMPORT"):
    try:                      # imports only: CUDA is first initialised in each forked child
        import cupy  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        pass

IMPLEMENTATIONS = ("default", "im2win_fused", "im2win", "direct", "im2col_gemm", "cudnn")
CPU_IMPLEMENTATIONS = ("default", "im2col_gemm")
GPU_ONLY = tuple(name for name in IMPLEMENTATIONS if name not in CPU_IMPLEMENTATIONS)


def implementation(name, device):
    """The callable fn(x, w, stride=, layout=) that `name` times on `device`.

    Raises NotImplementedError (asv: skipped) where it cannot run: a GPU-only implementation
    on the CPU, or cuDNN without PyTorch with CUDA.
    """
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {name!r}")
    if device.name != "gpu" and name in GPU_ONLY:
        raise NotImplementedError(f"{name} runs on the GPU only")
    if name == "cudnn":
        if not bench.torch_cuda_available():
            raise NotImplementedError("cuDNN needs PyTorch with CUDA")
        # torch tensors made once; an older commit's bench has only `cudnn` (conversions inside)
        return bench.CUDNN if hasattr(bench, "CUDNN") else bench.cudnn
    algorithm = "auto" if name == "default" else name
    return lambda x, w, **kwargs: conv2d(x, w, algorithm=algorithm, **kwargs)


def device_inputs(layer, batch, dtype, layout, device, seed=0):
    """Random x, w of `layer`, uniform in [-1, 1) (never zeros), drawn where they are used."""
    if device.name != "gpu":
        return bench.make_inputs(layer, batch, dtype, layout, seed)
    cupy = device.cupy
    rng = cupy.random.default_rng(seed)
    return tuple((2 * rng.random(shape, dtype=cupy.float32) - 1).astype(dtype)
                 for shape in layer.shapes(batch, layout))


class _Conv2d:
    """The benchmarks; subclasses give the device and the parameter grid."""

    param_names = ["layer", "dtype", "layout", "implementation"]
    timeout = 300
    device_name = None

    def setup(self, layer, dtype, layout, impl):
        if dtype == "bfloat16":
            from im2win import problem
            if not any(d.name == "bfloat16" for d in problem.DTYPES):
                raise NotImplementedError("this commit's im2win has no bfloat16")
            if impl == "im2col_gemm":
                raise NotImplementedError("CuPy's matmul has no bfloat16")
        self.device = bench.select_device(self.device_name)
        self.prepare(implementation(impl, self.device), layer, dtype, layout)

    def prepare(self, fn, layer, dtype, layout):
        """self.call: fn on `layer`'s inputs (a rotation of x), compiled and warmed up."""
        spec = LAYERS[layer]
        x, w = device_inputs(spec, self.device.batch, dtype, layout, self.device)
        self.flops = make_problem(x, w, stride=spec.stride, layout=layout).flops
        inputs = bench.rotation(x, self.device)
        if hasattr(bench, "bind"):
            self.call, _ = bench.bind(fn, inputs, w, layout, dict(stride=spec.stride))
        else:                                # an older commit's im2win.bench
            turn = itertools.cycle(inputs)
            self.call = lambda: fn(next(turn), w, stride=spec.stride, layout=layout)
        self.call()                          # compile and warm up outside the timing
        self.device.sync()

    def time_conv2d(self, *params):
        self.call()
        self.device.sync()

    def track_tflops(self, *params):
        return self.flops / self.device.time(self.call, min_seconds=0.1) / 1e12

    track_tflops.unit = "TFLOPS"

    def track_extra_memory(self, *params):
        return self.device.extra_memory(self.call)

    track_extra_memory.unit = "bytes"


class Conv2dGPU(_Conv2d):
    params = (list(LAYERS), ["float32", "float16", "bfloat16"], ["NCHW", "NHWC"],
              list(IMPLEMENTATIONS))
    device_name = "gpu"


class Conv2dCPU(_Conv2d):
    params = (list(LAYERS), ["float32"], ["NCHW", "NHWC"], list(CPU_IMPLEMENTATIONS))
    device_name = "cpu"


class PrecisionGPU(_Conv2d):
    """float32 at each `precision` of im2win.conv2d (``python -m im2win --dtype float32
    --precision P``): the planner's default at "float32" (CUDA cores), "3xtf32" and "tf32"
    (Tensor Cores, Hopper only: elsewhere asv reports the case as skipped), batch 128."""

    params = (list(LAYERS), ["float32", "3xtf32", "tf32"], ["NCHW", "NHWC"])
    param_names = ["layer", "precision", "layout"]
    device_name = "gpu"

    def setup(self, layer, precision, layout):
        import inspect
        if "precision" not in inspect.signature(conv2d).parameters:
            raise NotImplementedError("this commit's im2win.conv2d has no precision")
        self.device = bench.select_device(self.device_name)
        fn = implementation("default", self.device)
        try:
            self.prepare(lambda x, w, **kwargs: fn(x, w, precision=precision, **kwargs),
                         layer, "float32", layout)
        except ValueError as err:        # a precision this device or problem cannot run
            raise NotImplementedError(str(err)) from err


class HostTimeGPU:
    """Host microseconds per cached call of a tiny convolution (`bench.OVERHEAD_CASE`), as
    ``python -m im2win overhead``: im2win on CuPy arrays and on PyTorch tensors against
    torch.nn.functional.conv2d."""

    params = (["im2win", "im2win_torch", "torch"],)
    param_names = ["implementation"]
    timeout = 120

    def setup(self, impl):
        if not hasattr(bench, "host_overhead"):
            raise NotImplementedError("this commit's im2win.bench has no host_overhead")
        self.device = bench.select_device("gpu")
        if impl != "im2win" and bench.torch_viewer(self.device) is None:
            raise NotImplementedError("needs PyTorch with CUDA")

    def track_host_us(self, impl):
        us = bench.host_overhead(self.device)
        if impl not in us:               # a commit before im2win_torch was measured
            raise NotImplementedError(f"this commit's host_overhead has no {impl!r}")
        return us[impl]["host"]

    track_host_us.unit = "us"


class NetworksGPU:
    """Each network of `im2win.networks` at batch 32 (`bench.SUITE_BATCH`): im2win's speed
    against cuDNN over all its convolutions, each weighted by how often the network runs it
    (``python -m im2win --suite NETWORK --compare`` gives the layer-by-layer table)."""

    params = (["resnet50", "mobilenet_v2", "efficientnet_b0", "convnext_tiny",
               "resnext50_32x4d"], ["float32", "float16"])
    param_names = ["network", "dtype"]
    timeout = 600

    def setup(self, network, dtype):
        if not hasattr(bench, "bind"):
            raise NotImplementedError("this commit's im2win.bench has no network suites, or "
                                      "times cuDNN with conversions at its door")
        self.device = bench.select_device("gpu")
        if not bench.torch_cuda_available():
            raise NotImplementedError("cuDNN needs PyTorch with CUDA")

    def track_speedup_vs_cudnn(self, network, dtype):
        from im2win.networks import NETWORKS
        layout = "NCHW" if dtype == "float32" else "NHWC"      # cuDNN's best layout for each
        ours = theirs = 0.0
        for conv in NETWORKS[network]:
            x, w = device_inputs(conv, bench.SUITE_BATCH["gpu"], dtype, layout, self.device)
            for impl, fn in (("im2win", conv2d), ("cudnn", bench.CUDNN)):
                call, _ = bench.bind(fn, [x], w, layout, conv.kwargs)
                t = self.device.time(call, min_seconds=0.05)
                if impl == "im2win":
                    ours += conv.count * t
                else:
                    theirs += conv.count * t
        return theirs / ours

    track_speedup_vs_cudnn.unit = "x"


class GradientsGPU:
    """The two gradients on the twelve layers, batch 128, NHWC (``python -m im2win --op OP
    --compare``): im2win's (`im2win.gradients` on the GPU; backward filter in float16 on Hopper
    the `im2win.cuda.wgrad` kernel) and cuDNN's through PyTorch's convolution_backward; TFLOPS
    of the forward's FLOPs."""

    params = (list(LAYERS), ["float32", "float16"], ["backward_data", "backward_filter"],
              ["im2win", "cudnn"])
    param_names = ["layer", "dtype", "op", "implementation"]
    timeout = 300

    def setup(self, layer, dtype, op, impl):
        if not hasattr(bench, "torch_backward"):
            raise NotImplementedError("this commit's im2win has no GPU gradients")
        self.device = bench.select_device("gpu")
        if impl == "cudnn" and not bench.torch_cuda_available():
            raise NotImplementedError("cuDNN needs PyTorch with CUDA")
        spec = LAYERS[layer]
        x, w = device_inputs(spec, self.device.batch, dtype, "NHWC", self.device)
        prob = make_problem(x, w, stride=spec.stride, layout="NHWC")
        rng = self.device.cupy.random.default_rng(1)
        dy = (2 * rng.random(prob.y_shape, dtype=self.device.cupy.float32) - 1).astype(dtype)
        self.flops = prob.flops
        data = op == "backward_data"
        a, b, shape = (dy, w, prob.x_shape) if data else (x, dy, prob.w_shape)
        if impl == "cudnn":          # its placeholder: the array the gradient does not read
            fn = bench.torch_backward(op, prob.x_shape if data else prob.w_shape)
            kwargs = {}
        else:
            fn = bench._backward_data if data else bench._backward_filter
            kwargs = dict(shape=shape)
        self.call, _ = bench.bind(fn, [a], b, "NHWC", dict(kwargs, stride=spec.stride))
        self.call()
        self.device.sync()

    def track_tflops(self, layer, dtype, op, impl):
        return self.flops / self.device.time(self.call, min_seconds=0.1) / 1e12

    track_tflops.unit = "TFLOPS"
