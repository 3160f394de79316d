"""Every kernel specialisation compiles for sm_80 and sm_90, with no GPU (nvcc only)."""

import concurrent.futures
import os
import pathlib
import shutil
import subprocess

import pytest

from im2win.cuda.plan import source, specializations

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc"
                                if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
ARCHS = ("sm_80", "sm_90")


def instantiating_source(file: str) -> str:
    """The kernel file with every planned instantiation of it forced (by taking its address)."""
    names = [expr for f, expr in specializations() if f == file]
    assert names, f"no specialisation of {file}.cu is planned"
    return source(file) + "\n" + "\n".join(f"auto* instance_{i} = &{name};"
                                          for i, name in enumerate(names)) + "\n"


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed here")
def test_every_specialisation_compiles(tmp_path):
    jobs = []
    for file in sorted({f for f, _ in specializations()}):
        path = tmp_path / f"{file}.cu"
        path.write_text(instantiating_source(file))
        jobs += [(path, arch) for arch in ARCHS]

    def compile_one(job):
        path, arch = job
        cubin = path.with_suffix(f".{arch}.cubin")
        done = subprocess.run([NVCC, "-std=c++17", "-cubin", f"-arch={arch}", "-Xptxas",
                               "-warn-spills", "-o", str(cubin), str(path)],
                              capture_output=True, text=True)
        return path.name, arch, done.returncode, done.stderr

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(compile_one, jobs))
    failures = [f"{name} for {arch}:\n{err}" for name, arch, rc, err in results if rc != 0]
    assert not failures, "\n".join(failures)


def test_kernel_files_ship_with_the_package():
    kernel_dir = pathlib.Path(source.__globals__["KERNEL_DIR"])
    assert {p.name for p in kernel_dir.glob("*.cu*")} == {"common.cuh", "gemm.cuh", "direct.cu",
                                                           "window.cu", "im2win_conv.cu",
                                                           "im2win_mma.cu"}
