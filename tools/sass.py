"""A kernel's machine code without a GPU: compile specialisations with nvcc for their file's
arch, disassemble them (cuobjdump) and count their instructions, one column a specialisation.

    python3 tools/sass.py \\
        "im2win_wgmma:im2win_wgmma_tma<half_t, 128, 128, 5, true, true, true, false>" \\
        "im2win_wgmma:im2win_wgmma_tma<half_t, 128, 128, 5, true, true, true, false, 32>" \\
        [--ops HGMMA,STG,SHFL,BRA,SYNCS] [--dump DIR]

Each FILE:EXPR names a kernel file of im2win/cuda and a specialisation (as tools/prewarm.py's
``--expression``). Printed: registers and spills (ptxas), the kernel's instructions (NOPs left
out) and, per opcode (the mnemonic before its first dot), how many; ``--ops`` picks the opcodes,
else the 25 most frequent. ``--dump DIR`` writes each listing there (``cuobjdump -sass``). The
same PTX can schedule differently on another ptxas: this is the nvcc found here. cuobjdump and
the nvdisasm it runs: on PATH, beside nvcc, or from the PyPI wheels ``nvidia-cuda-cuobjdump``
and ``nvidia-cuda-nvdisasm`` (the test extra installs them on x86-64 Linux; no GPU needed).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import glob
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

from im2win.cuda.plan import FILE_ARCH, instantiating_source

INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")


def tool(name: str) -> str:
    """`name` on PATH, beside the real nvcc, or in an nvidia-* wheel's bin/."""
    found = shutil.which(name)
    if found:
        return found
    nvcc = shutil.which("nvcc")
    places = [os.path.join(os.path.dirname(os.path.realpath(nvcc)), name)] if nvcc else []
    places += ["/usr/local/cuda/bin/" + name]
    places += glob.glob(os.path.join(sysconfig.get_paths()["purelib"], "nvidia", "*", "bin", name))
    for place in places:
        if os.path.isfile(place) and os.access(place, os.X_OK):
            return place
    raise SystemExit(f"no {name}: put it on PATH, or pip install nvidia-cuda-{name}")


def compile_one(spec: str, work: pathlib.Path, nvcc: str, cuobjdump: str, env: dict,
                index: int):
    """(registers, spill line, {opcode: count}, listing) of the kernel FILE:EXPR names."""
    file, expr = spec.split(":", 1)
    arch = FILE_ARCH.get(file, "sm_90")
    path = work / f"k{index}.cu"
    path.write_text(instantiating_source(file, [expr]))
    done = subprocess.run([nvcc, "-std=c++17", "-cubin", f"-gencode=arch=compute_{arch[3:]},"
                           f"code={arch}", "-Xptxas", "-v", "-o", str(path.with_suffix(".cubin")),
                           str(path)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{spec}: nvcc failed\n{done.stderr[-3000:]}")
    listing = subprocess.run([cuobjdump, "-sass", str(path.with_suffix(".cubin"))],
                             capture_output=True, text=True, check=True, env=env).stdout
    # The instantiated kernel's function: its base name, and not the file's other kernels.
    base = expr.split("<")[0].strip()
    functions = re.split(r"\n\s*Function : ", listing)[1:]
    mine = [f for f in functions if re.search(rf"\d{base}I", f.split("\n")[0])] or functions
    body = "\n".join(mine)
    counts = collections.Counter(m.group(1) for m in INSTRUCTION.finditer(body))
    counts.pop("NOP", None)
    # ptxas -v: the instantiated kernel's resources (each kernel's lines start with its name)
    info = done.stderr
    regs = re.findall(rf"Compiling entry function '_Z\d+{base}I[^']*'.*?Used (\d+) registers",
                      info, re.S) or re.findall(r"Used (\d+) registers", info)
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", info)
    return (regs[0] if regs else "?", "/".join(spills[0]) if spills else "?", counts, body)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("specs", nargs="+", metavar="FILE:EXPR")
    parser.add_argument("--ops", default="", help="comma-separated opcodes to count")
    parser.add_argument("--dump", metavar="DIR")
    args = parser.parse_args(argv)
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    cuobjdump = tool("cuobjdump")
    env = dict(os.environ, NVDISASM_PATH=os.path.dirname(tool("nvdisasm")))   # cuobjdump runs it
    with tempfile.TemporaryDirectory() as tmp, \
            concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        results = list(pool.map(lambda a: compile_one(a[1], pathlib.Path(tmp), nvcc, cuobjdump,
                                                      env, a[0]), enumerate(args.specs)))
    if args.dump:
        os.makedirs(args.dump, exist_ok=True)
        for i, (*_, body) in enumerate(results):
            pathlib.Path(args.dump, f"k{i}.sass").write_text(body)
    total = collections.Counter()
    for _, _, counts, _ in results:
        total.update(counts)
    ops = args.ops.split(",") if args.ops else [op for op, _ in total.most_common(25)]
    for i, spec in enumerate(args.specs):
        print(f"[{i}] {spec}")
    print(f"{'':14s}" + "".join(f"{f'[{i}]':>9s}" for i in range(len(results))))
    rows = [("registers", [r for r, *_ in results]), ("spills st/ld", [s for _, s, *_ in results]),
            ("instructions", [sum(c.values()) for _, _, c, _ in results])]
    rows += [(op, [c.get(op, 0) for _, _, c, _ in results]) for op in ops]
    for name, values in rows:
        print(f"{name:14s}" + "".join(f"{v!s:>9s}" for v in values))
    return 0


if __name__ == "__main__":
    sys.exit(main())
