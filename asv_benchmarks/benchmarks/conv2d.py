"""im2win.conv2d on the twelve benchmark layers, timed and tracked by airspeed velocity.

Each parameter set builds its inputs once in `setup`; GPU parameters raise NotImplementedError
there when the GPU path is unavailable, which asv reports as skipped. Timings, TFLOPS and memory
come from the same code as ``python -m im2win`` (`im2win.bench`).
"""

from im2win import bench
from im2win.api import conv2d
from im2win.layers import LAYERS


class Conv2dLayers:
    params = (list(LAYERS), ["float32", "float16"], ["NCHW", "NHWC"], ["cpu", "gpu"])
    param_names = ["layer", "dtype", "layout", "device"]
    timeout = 600

    def setup(self, layer, dtype, layout, device):
        self.device = bench.select_device(device)
        prob, _, _, x, w = bench.prepare(LAYERS[layer], self.device.batch, dtype, layout,
                                         self.device)
        self.flops = prob.flops
        self.call = lambda: conv2d(x, w, stride=prob.sh, layout=layout)
        self.call()                                   # compile and warm up outside the timing

    def time_conv2d(self, layer, dtype, layout, device):
        self.call()
        self.device.sync()

    def track_tflops(self, layer, dtype, layout, device):
        return self.flops / self.device.time(self.call) / 1e12

    track_tflops.unit = "TFLOPS"

    def track_extra_memory(self, layer, dtype, layout, device):
        return self.device.extra_memory(self.call)

    track_extra_memory.unit = "bytes"
