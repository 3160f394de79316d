"""The ablation study: each optimisation of the im2win kernels switched off alone, per layer.

``python3 tools/ablation.py OUT.json [--layers cv1,cv5] [--batch 128] [--layouts NHWC]``

For float32 (`Options.ablations(tensor_cores=False)`, the CUDA-core kernel), float16 on the
mma.sync kernel (`Options.ablations(tensor_cores=True)`) and, on Hopper, float16 on the Hopper
kernels ("float16-wgmma", `Options.ablations(hopper=True)`, on the layers where the planner takes
one of plan.HOPPER_FILES: im2win_wgmma.cu, narrow_wgmma.cu's stems, rows_wgmma.cu), on each layer
and layout:
time ``im2win.conv2d(x, w, stride=, layout=, options=)`` for the full option set and for each
variant (`im2win.bench.GPU.time`: median of CUDA-event timings after a warm-up call, inputs
rotated past the L2), check each variant's result against the full set's (first and last image, same inputs;
within twice the dtype's tolerance for the reduction, as both are within it of the exact sum), and report slowdown = ms / ms of the full set. Writes
JSON (command, date, machine, rows) and prints a table of slowdowns last.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import sys

import numpy as np

# kernel set: (dtype, Options.ablations keyword arguments)
DTYPES = {"float32": ("float32", {}), "float16": ("float16", dict(tensor_cores=True)),
          "float16-wgmma": ("float16", dict(hopper=True))}


def variants(kernels: str) -> dict:
    from im2win.cuda import Options
    return Options.ablations(**DTYPES[kernels][1])


def runs_on_hopper(prob, x) -> bool:
    """Whether the planner takes a Hopper kernel for this problem on this device (itself, or
    as the inner plan of an NHWC twin or of a stem's window columns): im2win_wgmma.cu,
    narrow_wgmma.cu (the stems) or rows_wgmma.cu (cv4), so that the Hopper switches of each
    (`stem_rows`, `window_rows` too) are measured where they act."""
    from im2win import cuda
    from im2win.cuda import launch, plan
    chosen = plan.make_plan(prob, x_strides=launch.element_strides(x, prob.layout),
                            w_aligned=True, arch=cuda.compute_capability(x.data.device_id))
    return (chosen.inner or chosen).file in plan.HOPPER_FILES


def slowdowns(rows: list[dict]) -> list[dict]:
    """Add slowdown = ms / ms of the "full" row of the same (layer, dtype, layout)."""
    full = {(r["layer"], r["dtype"], r["layout"]): r["ms"] for r in rows if r["variant"] == "full"}
    return [dict(r, slowdown=r["ms"] / full[r["layer"], r["dtype"], r["layout"]]) for r in rows]


def format_table(rows: list[dict]) -> str:
    """Slowdown factors: one line per (dtype, layout, variant), one column per layer, then
    the geometric mean over the layers."""
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    cells = {(r["dtype"], r["layout"], r["variant"], r["layer"]): r for r in rows}
    head = ["dtype", "layout", "variant", *layers, "geomean"]
    body = []
    for key in dict.fromkeys((r["dtype"], r["layout"], r["variant"]) for r in rows):
        factors = [cells[(*key, layer)]["slowdown"] for layer in layers
                   if (*key, layer) in cells]
        mark = {layer: "" if cells.get((*key, layer), {}).get("ok", True) else "!"
                for layer in layers}
        body.append([*key, *(f"{cells[(*key, layer)]['slowdown']:.2f}{mark[layer]}"
                             if (*key, layer) in cells else "-" for layer in layers),
                     f"{geomean(factors):.2f}"])
    widths = [max(len(str(line[i])) for line in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(str(c).rjust(w) for c, w in zip(line, widths)) for line in [head, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def geomean(values) -> float:
    values = list(values)
    return float(np.exp(np.mean(np.log(values)))) if values else float("nan")


def record(command: str, machine: dict, batch: int, rows: list[dict]) -> dict:
    """The JSON written: what was run, where, when, and the rows with their slowdowns."""
    return {"command": command,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "batch": batch, "machine": machine, "rows": slowdowns(rows)}


def measure_layer(layer, kernels: str, layout: str, batch: int, device) -> list[dict]:
    """Time the full option set and each variant of a kernel set on one layer; check each
    against the full."""
    import im2win
    from im2win import bench
    from im2win.problem import make_problem
    from im2win.testing import allowed_error, relative_error

    dtype = DTYPES[kernels][0]
    _, _, _, x, w = bench.prepare(layer, batch, dtype, layout, device)
    prob = make_problem(x, w, stride=layer.stride, layout=layout)
    if kernels.endswith("wgmma") and not runs_on_hopper(prob, x):
        return []
    inputs = bench.rotation(x, device)
    # Both results are within allowed_error of the exact answer, so within twice it of each other.
    tolerance = 2 * allowed_error(dtype, prob.reduction)
    sample = bench.sample_images(batch)
    rows, y_full = [], None
    for name, options in variants(kernels).items():
        turn = itertools.cycle(inputs)

        def call():
            return im2win.conv2d(next(turn), w, stride=layer.stride, layout=layout,
                                 options=options)
        y = device.to_host(im2win.conv2d(x, w, stride=layer.stride, layout=layout,
                                         options=options)[sample])
        y_full = y if y_full is None else y_full
        error = relative_error(y, y_full)
        seconds = device.time(call, min_runs=5, max_runs=50, min_seconds=0.1)
        rows.append({"layer": layer.name, "dtype": kernels, "layout": layout, "variant": name,
                     "ms": seconds * 1e3, "tflops": prob.flops / seconds / 1e12,
                     "rel_error_vs_full": error, "ok": bool(error <= tolerance)})
        print(f"{layer.name} {kernels} {layout} {name}: {seconds * 1e3:.3f} ms", file=sys.stderr)
    return rows


def parse_args(argv):
    from im2win.layers import LAYERS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("json", help="where to write the results")
    parser.add_argument("--layers", default=",".join(LAYERS))
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--layouts", default="NHWC",
                        help="comma-separated (default NHWC: the primary layout of both "
                             "kernels; NCHW too doubles the run time)")
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args(argv)
    args.layers = [LAYERS[name] for name in args.layers.split(",")]
    args.dtypes = args.dtypes.split(",")
    args.layouts = args.layouts.split(",")
    return args


def main(argv=None) -> int:
    from im2win import bench
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if not bench.cuda.is_available():
        print("error: no GPU is visible (the ablation times the GPU kernels)", file=sys.stderr)
        return 2
    device = bench.GPU()
    command, machine = "python3 tools/ablation.py " + " ".join(argv), bench.machine_info(device)
    rows = []
    for dtype, layout, layer in itertools.product(args.dtypes, args.layouts, args.layers):
        rows += measure_layer(layer, dtype, layout, args.batch, device)
        result = record(command, machine, args.batch, rows)
        with open(args.json, "w") as f:       # after every layer: a cut-off run keeps its rows
            json.dump(result, f, indent=1)
    print(format_table(result["rows"]))
    wrong = [f"{r['layer']}/{r['dtype']}/{r['layout']}/{r['variant']}" for r in result["rows"]
             if not r["ok"]]
    print(f"{len(rows) - len(wrong)} of {len(rows)} variants agree with the full kernel"
          + (f"; DIFFERENT (marked !): {', '.join(wrong)}" if wrong else ""))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
