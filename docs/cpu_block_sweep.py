"""Time the CPU path at several block sizes (im2win.cpu.BLOCK_BYTES); write JSON for the docs.

Run: ``python docs/cpu_block_sweep.py docs/data/cpu-block-bytes.json``.
"""

import datetime
import json
import sys

from im2win import bench, cpu
from im2win.layers import LAYERS

SIZES_MIB = (1, 4, 16, 64)
LAYER_NAMES = ("cv1", "cv4", "cv8", "cv10")


def main(path):
    rows = []
    for name in LAYER_NAMES:
        prob, _, _, x, w = bench.prepare(LAYERS[name], bench.CPU_BATCH, "float32", "NCHW",
                                         bench.CPU)
        for mib in SIZES_MIB:
            cpu.BLOCK_BYTES = mib << 20
            def call():
                return bench.im2win.conv2d(x, w, stride=prob.sh)
            rows.append(dict(layer=name, block_mib=mib, time_ms=bench.CPU.time(call) * 1e3,
                             extra_bytes=bench.CPU.extra_memory(call)))
    record = dict(command="python docs/cpu_block_sweep.py " + path, batch=bench.CPU_BATCH,
                  date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  rows=rows)
    with open(path, "w") as f:
        json.dump(record, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
