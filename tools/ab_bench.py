"""A/B of commits on the GPU machine: the twelve layers, im2win's default, in one call.

``python3 tools/ab_bench.py BASE[,REV...] OUTDIR [--dtypes float32,float16] [--layouts NCHW,NHWC]``

BASE (and each REV) is checked out in a git worktree (or is a directory holding such a tree,
e.g. made with ``git archive``); every tree's kernels, this one's too, are
compiled first, in parallel (tools/prewarm.py); then, for each dtype and layout,
``python -m im2win`` runs on each tree in turn, this one last (each in its own process),
writing OUTDIR/TAG-DTYPE-LAYOUT.json (TAG: the revision, or "new" for this tree). The table
printed last gives each layer's TFLOPS per tree and, per tree, the geometric mean of its ratios
to BASE.
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
    parser.add_argument("revs")
    parser.add_argument("outdir")
    parser.add_argument("--dtypes", default="float32,float16")
    parser.add_argument("--layouts", default="NCHW,NHWC")
    args = parser.parse_args()
    out = pathlib.Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    trees = {}
    for rev in args.revs.split(","):
        tree = pathlib.Path(rev).resolve() if pathlib.Path(rev).is_dir() else \
            pathlib.Path(f"/tmp/im2win-ab-{rev}")
        rev = tree.name if pathlib.Path(rev).is_dir() else rev
        if not tree.exists():
            subprocess.run(["git", "worktree", "add", "--detach", str(tree), rev], cwd=ROOT,
                           check=True, capture_output=True)
        trees[rev] = tree
    trees["new"] = ROOT
    jobs = max(1, 16 // len(trees))
    warm = [subprocess.Popen([sys.executable, str(ROOT / "tools" / "prewarm.py"), "--dtypes",
                              args.dtypes, "--layouts", args.layouts, "--jobs", str(jobs)],
                             cwd=tree, env=dict(os.environ, PYTHONPATH=str(tree)))
            for tree in trees.values()]
    for p in warm:
        p.wait()
    base = next(iter(trees))
    table, summary, status = [], [], 0
    for dtype in args.dtypes.split(","):
        for layout in args.layouts.split(","):
            rows = {}
            for tag, tree in trees.items():
                path = out / f"{tag}-{dtype}-{layout}.json"
                done = run(tree, ["-m", "im2win", "--dtype", dtype, "--layout", layout,
                                  "--json", str(path)])
                (out / f"{tag}-{dtype}-{layout}.log").write_text(done.stdout + done.stderr)
                status |= done.returncode
                rows[tag] = {r["layer"]: r["tflops"] for r in json.loads(path.read_text())["rows"]}
            for layer in rows[base]:
                table.append(f"{dtype:8} {layout} {layer:5} " +
                             " ".join(f"{rows[tag][layer]:8.2f}" for tag in trees))
            line = f"{dtype:8} {layout} geomean/{base}:"
            for tag in trees:
                ratios = [rows[tag][layer] / rows[base][layer] for layer in rows[base]]
                line += f" {tag} {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}" \
                        f" (min {min(ratios):.2f})"
            summary.append(line)
    print("dtype    layout layer " + " ".join(f"{tag[:8]:>8}" for tag in trees))
    print("\n".join(table + summary))
    return status


if __name__ == "__main__":
    sys.exit(main())
