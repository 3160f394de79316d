"""float32 stems over their materialised window's runs ("im2win_runs") against their window
columns ("im2win_columns") and cuDNN, in one process on the GPU machine.

``python3 tools/runs_dev.py [--layers cv1,cv2] [--layouts NCHW,NHWC]``: for each layer and
layout, `im2win.conv2d` with "auto", "im2win_runs" and "im2win_columns" forced (each checked
against float64 with y poisoned, then timed back to back with CUDA events, `GPU.time`, as the
benchmark does), window.cu's window_runs alone on x (the window tensor "im2win_runs" writes
first, in us; with ``--window-from FILE`` also another form of it, checked equal), and cuDNN
FP32 (TF32 off). Benchmark layers (cv*) at batch 128, network layers at 32. Table last
(TFLOPS; the plan's kernel).
"""

import argparse
import pathlib
import sys

import cupy

from im2win.cuda import launch
from im2win.cuda.plan import runs_pitch, source

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from columns_dev import measure, print_table, run_table  # noqa: E402
from emulate_window import with_runs  # noqa: E402

VARIANTS = ("auto", "im2win_runs", "im2win_columns")


def window_kernel(path: str | None):
    """window.cu's window_runs<float> as a launch.Packed, or window.cu with the file at
    `path`'s form of it in its place (emulate_window.with_runs; launched as the tree's, a
    block a row, grid-stride)."""
    if path is None:
        return launch.packed("window", "window_runs<float>", launch.WINDOW_RUNS_PARAMS)
    module = cupy.RawModule(code=with_runs(source("window"), pathlib.Path(path)),
                            options=("-std=c++17",), name_expressions=["window_runs<float>"])
    return launch.Packed(module.get_function("window_runs<float>"), launch.WINDOW_RUNS_PARAMS)


def window_us(prob, x, device, path: str | None) -> float:
    """us of window_runs (the tree's, or `path`'s: checked equal to the tree's) writing x's
    window tensor (rows runs_pitch apart)."""
    P, pitch = prob.P, runs_pitch(prob)
    blocks = launch.WINDOW_RUNS_BLOCKS * launch.sm_count(cupy.cuda.runtime.getDevice())
    strides = launch.element_strides(x, prob.layout)

    def call(runs, x_win):
        runs((min(prob.N * P, blocks), 1, 1), (256, 1, 1), cupy.cuda.get_current_stream().ptr,
             x.data.ptr, x_win.data.ptr, prob.N * P, P, pitch, prob.H, prob.W, prob.C, prob.R,
             prob.sh, prob.dh, prob.pt, prob.pl, *strides)
    x_win = cupy.full(prob.N * P * pitch, cupy.nan, cupy.float32)
    runs = window_kernel(path)
    call(runs, x_win)
    if path is not None:
        ours = cupy.full_like(x_win, cupy.nan)
        call(window_kernel(None), ours)
        assert bool((ours == x_win).all()), "the two window kernels disagree"
    return device.time(lambda: call(runs, x_win)) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="cv1,cv2")
    ap.add_argument("--layouts", default="NCHW,NHWC")
    ap.add_argument("--window-from", help="also time window_runs as this file defines it, "
                    "checked against the tree's")
    args = ap.parse_args()

    def cells_of(prob, x, w, layout, kw, device):
        cells = {v: measure(prob, x, w, layout, kw, v, device) for v in VARIANTS}
        cells["window us"] = (window_us(prob, x, device, None), None, "")
        if args.window_from:
            cells["its window us"] = (window_us(prob, x, device, args.window_from), None, "")
        return cells

    rows = run_table(args.layers, args.layouts, cells_of)
    raise SystemExit(1 if print_table(rows, "the plan's kernel; window us: its window alone",
                                      1e-5) else 0)


if __name__ == "__main__":
    main()
