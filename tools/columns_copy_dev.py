"""layout.cu's window_columns alone (the stems' window columns, `im2win_columns`), in one process
on the GPU machine: x in NCHW and NHWC, with several counts of blocks an SM.

``python3 tools/columns_copy_dev.py [--layers cv1,cv2] [--blocks 4,6,7] [--dtype float32]``: per
layer, layout and count, GPU time of one window_columns launch (bench.GPU.time: CUDA events,
median after warm-up) and the bandwidth it reaches on the bytes it must move (x read once, the
columns written once), the columns checked against the first count's. Table last.
"""

import argparse
import sys

import cupy

from im2win.bench import GPU, GPU_BATCH, make_inputs
from im2win.cuda.launch import sm_count
from im2win.cuda.plan import CUDA_TYPES, columns_stage, dtype_of
from im2win.cuda.wgrad import columns_into, window_columns_kernel
from im2win.layers import LAYERS
from im2win.problem import make_problem


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="cv1,cv2")
    parser.add_argument("--blocks", default="4,6,7")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    device, rows, wrong = GPU(), [], 0
    sms = sm_count(cupy.cuda.runtime.getDevice())
    for name in args.layers.split(","):
        layer = LAYERS[name]
        for layout in ("NCHW", "NHWC"):
            x_host, w_host = make_inputs(layer, GPU_BATCH, dtype_of(args.dtype), layout)
            x, w = cupy.asarray(x_host), cupy.asarray(w_host)
            prob = make_problem(x, w, layout=layout, **layer.kwargs)
            view = x.transpose(0, 2, 3, 1) if layout == "NCHW" else x      # (n, h, w, c)
            C2 = columns_stage(prob).C
            kernel = window_columns_kernel(CUDA_TYPES[prob.dtype.name][0])
            first = None
            for blocks in map(int, args.blocks.split(",")):
                x2 = cupy.full((prob.N, prob.H, prob.Q, C2), cupy.nan, prob.dtype)
                call = lambda: columns_into(kernel, view, x2, prob.H, prob.W, prob.C,  # noqa
                                            prob.S, prob.sw, prob.dw, prob.pl, blocks * sms)
                call()
                if first is None:
                    first = x2.copy()
                same = bool((x2 == first).all())
                wrong += not same
                seconds = device.time(call)
                moved = x.nbytes + x2.nbytes
                rows.append((name, layout, blocks, 1e6 * seconds, moved / seconds / 1e12, same))
    print(f"{args.dtype}, batch {GPU_BATCH}: window_columns, GPU us (median), TB/s moved")
    for name, layout, blocks, us, tbs, same in rows:
        print(f"{name:5s} {layout}  {blocks} blocks/SM  {us:8.1f} us  {tbs:5.2f} TB/s"
              f"{'' if same else '  DIFFERS'}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
