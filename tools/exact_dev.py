"""im2win_ffma.cu's kExact forms (plan.ffma_exact: no bounds predicates where every load is
inside x and w) against the checked forms, on the float32 layers, in one process on the GPU
machine.

``python3 tools/exact_dev.py [--layers cv4,cv5,...] [--layouts NHWC,NCHW] [--rounds 2]``: for
each layer and layout, `im2win.conv2d` ("auto") with Options.exact_loads off ("checked": the
tree before it) and on ("exact"), each checked against float64 (PyTorch on the GPU) on the batch's
first and last 2 images with y poisoned first, then timed back to back with CUDA events
(`bench.GPU.time`, as the benchmark does), the two alternating over `rounds`. Network layers
at batch 32, cv* at 128. Table last: TFLOPS (error; the plan's kernel).
"""

import argparse
import functools
import pathlib
import sys

import cupy
import numpy as np

import im2win
from im2win import bench
from im2win.bench import GPU, bind
from im2win.cuda import Options

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ffma_split_dev import error_of, layer_inputs  # noqa: E402


def kernel_of(x, w, layout, kw, options) -> str:
    p = im2win.cuda._plan(bench.make_problem(x, w, layout=layout, **kw), x, w, "auto", options,
                          None)
    while p.inner is not None:
        p = p.inner
    return p.kernel or p.file


def compare(variants: dict, layers: str, layouts: str, rounds: int, same_bits: bool = False) -> int:
    """For each layer and layout, `im2win.conv2d` ("auto") under each of `variants` (label:
    Options), each checked against float64 with y poisoned first (`same_bits`: the outputs
    also compared bit for bit), then timed, the variants alternating over `rounds`; the
    table last. Returns the number of wrong results."""
    device = GPU()
    if not bench.torch_cuda_available():
        raise SystemExit("needs PyTorch on the GPU (the float64 check)")
    rows, wrong = [], 0
    for name, layout, prob, x, w, kw in layer_inputs(layers, layouts, device):
        cells, outputs = {}, []
        for rnd in range(rounds):
            for label, options in variants.items():
                conv = functools.partial(im2win.conv2d, options=options)
                if rnd == 0:
                    y = cupy.full(prob.y_shape, np.nan, np.float32)
                    conv(x, w, out=y, layout=layout, **kw)
                    err = max(error_of(x, w, kw, layout, y),
                              error_of(x[-2:], w, kw, layout, y[-2:]))
                    wrong += not err < 1e-5
                    cells[label] = [[], err, kernel_of(x, w, layout, kw, options)]
                    outputs.append(y if same_bits else None)
                call, _ = bind(conv, [x], w, layout, kw)
                cells[label][0].append(prob.flops / device.time(call) / 1e12)
        equal = not same_bits or all(bool(cupy.array_equal(outputs[0], y)) for y in outputs)
        wrong += not equal
        rows.append((name, layout, cells, equal))
        print(name, layout, {k: (v[0], v[1]) for k, v in cells.items()}, flush=True)
        del x, w, outputs
        cupy.get_default_memory_pool().free_all_blocks()
    print("\nfloat32, TFLOPS, best of the rounds (max error against float64; kernel)")
    for name, layout, cells, equal in rows:
        print(f"{name} {layout}: " + "  ".join(
            f"{label}={max(t):.1f} ({err:.0e}; {kernel})" for label, (t, err, kernel)
            in cells.items()) + ("" if not same_bits else "  equal" if equal else
                                 "  OUTPUTS DIFFER"))
    return wrong


def cli(doc: str, variants: dict, layers: str, rounds: int, same_bits: bool = False) -> int:
    """A tool's command line (--layers, --layouts, --rounds; `layers` and `rounds` the
    defaults) running `compare` on `variants`; its exit status."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--layers", default=layers)
    ap.add_argument("--layouts", default="NHWC,NCHW")
    ap.add_argument("--rounds", type=int, default=rounds)
    args = ap.parse_args()
    return 1 if compare(variants, args.layers, args.layouts, args.rounds, same_bits) else 0


if __name__ == "__main__":
    sys.exit(cli(__doc__, {"checked": Options(exact_loads=False),
                           "exact": Options(exact_loads=True)},
                 "cv4,cv5,cv6,cv8,cv9,cv10,cv11,cv12", 2))
