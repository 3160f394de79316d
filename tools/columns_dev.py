"""float32 stems over window columns on im2win_ffma.cu, in one process on the GPU machine:
tiles of 64 filters against tiles of 96 (`tuning.FFMA_96_ROWS`) where K/G is 96, 288, ...

``python3 tools/columns_dev.py [--layers cv1,cv2,convnext_tiny.0] [--layouts NCHW,NHWC]``:
for each layer and layout, `im2win.conv2d` as planned ("auto") and with
`algorithm="im2win_columns"` forced, each with FFMA_96_ROWS off and on, checked against float64
(PyTorch on the GPU, first 2 images) with y poisoned first, then timed back to back with CUDA
events (`bench.GPU.time`, as the benchmark does), against cuDNN FP32 (TF32 off). Benchmark
layers (cv*) at batch 128, network layers at 32. Table last (TFLOPS, the inner plan's tile).
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
from im2win.cuda import tuning

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ffma_split_dev import error_of, layer_inputs  # noqa: E402

VARIANTS = {"auto": ("auto", False), "auto 96": ("auto", True),
            "columns 64": ("im2win_columns", False), "columns 96": ("im2win_columns", True)}


def plan_of(x, w, layout, kw, algorithm) -> str:
    """The plan's innermost kernel file and its tile (narrow_ffma.cu: pixels a thread, TP x TQ)."""
    p = im2win.cuda._plan(bench.make_problem(x, w, layout=layout, **kw), x, w, algorithm,
                          None, None)
    while p.inner is not None:
        p = p.inner
    if p.file == "narrow_ffma":            # pixels a thread, TP x TQ
        return f"{p.file}:{p.kernel.split(', ')[3]}:{'x'.join(map(str, p.geometry.ints[-2:]))}"
    return f"{p.file}:{p.tile.name if p.tile else '-'}"


def measure(prob, x, w, layout, kw, algorithm, device) -> tuple:
    """(TFLOPS, max error against float64, plan) of `im2win.conv2d` with `algorithm`: y
    poisoned, checked, then timed back to back (`GPU.time`); (None, None, why) where the
    algorithm cannot run the problem."""
    im2win.cuda._calls.clear()
    try:
        plan = plan_of(x, w, layout, kw, algorithm)
    except ValueError as e:
        return None, None, str(e)[:60]
    y = cupy.full(prob.y_shape, np.nan, np.float32)
    im2win.conv2d(x, w, out=y, layout=layout, algorithm=algorithm, **kw)
    err = error_of(x, w, kw, layout, y)
    del y
    call, _ = bind(functools.partial(im2win.conv2d, algorithm=algorithm), [x], w, layout, kw)
    return prob.flops / device.time(call) / 1e12, err, plan


def cudnn_cell(prob, x, w, layout, kw, device) -> tuple:
    """cuDNN's cell of the table: (TFLOPS, 0, "")."""
    call, _ = bind(bench.CUDNN, [x], w, layout, kw)
    return prob.flops / device.time(call) / 1e12, 0.0, ""


def print_table(rows, what: str, bound: float) -> int:
    """The table (a line a layer and layout: each variant's TFLOPS, error and plan); how many
    cells exceed `bound` of error."""
    print(f"\nfloat32, TFLOPS (max error against float64; {what})")
    wrong = 0
    for name, layout, cells in rows:
        wrong += sum(err is not None and not err < bound for label, (_, err, _) in cells.items()
                     if label != "cuDNN")
        print(f"{name} {layout}: " + "  ".join(
            f"{label}=" + ("-" if tf is None else f"{tf:.1f}") +
            ("" if err is None or label == "cuDNN" else
             f" ({err:.0e}{'' if err < bound else ' WRONG'}; {plan})")
            for label, (tf, err, plan) in cells.items()))
    return wrong


def run_table(layers: str, layouts: str, cells_of) -> list:
    """For each layer and layout (layer_inputs), `cells_of(prob, x, w, layout, kw, device)`'s
    cells (label -> measure's triple) and cuDNN's, each row printed as it comes; the rows."""
    device = GPU()
    if not bench.torch_cuda_available():          # also: cuDNN benchmark on, TF32 off
        raise SystemExit("needs PyTorch on the GPU (cuDNN)")
    rows = []
    for name, layout, prob, x, w, kw in layer_inputs(layers, layouts, device):
        cells = cells_of(prob, x, w, layout, kw, device)
        im2win.cuda._calls.clear()
        cells["cuDNN"] = cudnn_cell(prob, x, w, layout, kw, device)
        rows.append((name, layout, cells))
        print(rows[-1], flush=True)
        del x, w
        cupy.get_default_memory_pool().free_all_blocks()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="cv1,cv2,convnext_tiny.0")
    ap.add_argument("--layouts", default="NCHW,NHWC")
    args = ap.parse_args()

    def cells_of(prob, x, w, layout, kw, device):
        cells = {}
        for label, (algorithm, rows96) in VARIANTS.items():
            tuning.FFMA_96_ROWS = rows96
            cells[label] = measure(prob, x, w, layout, kw, algorithm, device)
        tuning.FFMA_96_ROWS = True
        return cells

    print_table(run_table(args.layers, args.layouts, cells_of), "inner kernel:tile", 1e-4)


if __name__ == "__main__":
    main()
