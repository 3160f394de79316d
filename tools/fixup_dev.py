"""im2win_ffma.cu's split-K with its fixup (Options.split_fixup: each tile's last block sums
the ranges and writes y) against split_reduce's second launch, on the float32 layers the
planner splits, in one process on the GPU machine.

``python3 tools/fixup_dev.py [--layers cv6,cv11,cv12,resnet50.16,...] [--layouts NHWC,NCHW]
[--rounds 3]``: for each layer and layout, `im2win.conv2d` ("auto") with the fixup off
("reduce") and on ("fixup", on every split, whatever plan.ffma_fixup_pays says: this
measures that rule), each checked against float64 (PyTorch on the
GPU) on the batch's first and last 2 images with y poisoned first, the two outputs compared
bit for bit, then timed with CUDA events (`bench.GPU.time`, as the benchmark does), the two
alternating over `rounds`. Network layers at batch 32, cv* at 128. Table last: TFLOPS, best
of the rounds (error; the plan's kernel; whether the outputs are equal).
"""

import pathlib
import sys

from im2win.cuda import Options
from im2win.cuda import plan as planning

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from exact_dev import cli  # noqa: E402

if __name__ == "__main__":
    planning.ffma_fixup_pays = lambda *args: True   # on every split: what its rule measures
    sys.exit(cli(__doc__, {"reduce": Options(split_fixup=False),
                           "fixup": Options(split_fixup=True)},
                 "cv6,cv11,cv12,resnet50.16,resnet50.18,resnet50.22", 3, same_bits=True))
