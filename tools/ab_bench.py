"""A/B of two commits on the GPU machine: the twelve layers, im2win's default, in one call.

``python3 tools/ab_bench.py OLD_REV OUTDIR [--dtypes float32,float16] [--layouts NCHW,NHWC]``

OLD_REV is checked out in a git worktree; both trees' kernels are compiled first, in parallel
(tools/prewarm.py); then, for each dtype and layout, ``python -m im2win`` runs on the old tree
and right after on this one (each in its own process), writing OUTDIR/{old,new}-DTYPE-LAYOUT.json.
The table printed last gives each layer's TFLOPS on both and their ratio, and the geometric mean.
"""

import argparse
import json
import math
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run(tree, args, env_extra=None):
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONUNBUFFERED="1", **(env_extra or {}))
    return subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True,
                          text=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("old")
    parser.add_argument("outdir")
    parser.add_argument("--dtypes", default="float32,float16")
    parser.add_argument("--layouts", default="NCHW,NHWC")
    args = parser.parse_args()
    out = pathlib.Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    old = pathlib.Path("/tmp/im2win-ab-old")
    if not old.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(old), args.old], cwd=ROOT,
                       check=True, capture_output=True)
    trees = {"old": old, "new": ROOT}
    warm = [subprocess.Popen([sys.executable, str(ROOT / "tools" / "prewarm.py"), "--dtypes",
                              args.dtypes, "--layouts", args.layouts, "--jobs", "8"],
                             cwd=tree, env=dict(os.environ, PYTHONPATH=str(tree)))
            for tree in trees.values()]
    for p in warm:
        p.wait()
    table, status = [], 0
    for dtype in args.dtypes.split(","):
        for layout in args.layouts.split(","):
            rows = {}
            for tag, tree in trees.items():
                path = out / f"{tag}-{dtype}-{layout}.json"
                done = run(tree, ["-m", "im2win", "--dtype", dtype, "--layout", layout,
                                  "--json", str(path)])
                (out / f"{tag}-{dtype}-{layout}.log").write_text(done.stdout + done.stderr)
                status |= done.returncode
                rows[tag] = {r["layer"]: r for r in json.loads(path.read_text())["rows"]}
            ratios = []
            for layer, new in rows["new"].items():
                ratio = new["tflops"] / rows["old"][layer]["tflops"]
                ratios.append(ratio)
                table.append(f"{dtype:8} {layout} {layer:5} {rows['old'][layer]['tflops']:8.2f} "
                             f"{new['tflops']:8.2f} {ratio:6.3f}")
            geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
            table.append(f"{dtype:8} {layout} geomean new/old {geo:.3f} "
                         f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
    print("dtype    layout layer   old TF   new TF  ratio")
    print("\n".join(table))
    return status


if __name__ == "__main__":
    sys.exit(main())
