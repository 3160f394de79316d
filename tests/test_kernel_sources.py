"""Every kernel specialisation CI lists (plan.specializations) compiles, with no GPU (nvcc
only): for sm_90, each file's first chunk for sm_80 too (SASS for both from one front-end
pass), and the Hopper kernels (wgmma) for sm_90a. Instantiations are compiled in chunks, in
parallel."""

import concurrent.futures
import os
import pathlib
import re
import shutil
import subprocess

import pytest

from im2win.cuda.plan import FILE_ARCH, instantiating_source, source, specializations

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc"
                                if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
ARCHS = ("sm_80", "sm_90")
PRIMARY = "sm_90"   # every instantiation; the first chunk of each file for all of ARCHS
CHUNK = 40      # instantiations per nvcc run: many runs keep every core busy to the end
ROOT_DIR = pathlib.Path(__file__).resolve().parents[1]


def archs(file: str) -> tuple[str, ...]:
    """The targets a kernel file is compiled for (the wgmma kernel exists only for sm_90a)."""
    return (FILE_ARCH[file],) if file in FILE_ARCH else ARCHS


def arch_flags(arch: str) -> list[str]:
    # The -gencode form: with some nvcc versions -arch=sm_90a also runs a plain sm_90 pass,
    # which rejects wgmma.
    if arch.endswith("a"):
        return [f"-gencode=arch=compute_{arch[3:]},code={arch}"]
    return [f"-arch={arch}"]


def file_flags(file: str, every_arch: bool = True) -> list[str]:
    """nvcc's output and targets for one kernel file: a cubin for its own arch (FILE_ARCH);
    with every_arch one fat binary with SASS for every arch of ARCHS made by ptxas from one
    front-end pass, else a cubin for PRIMARY from the same PTX. The files but FILE_ARCH's never
    branch on __CUDA_ARCH__, which the test below checks, so their PTX is the same for every
    target and only ptxas differs: its limits (255 registers a thread, 48 KB of static
    shared memory) are the same on both, and the second ptxas pass was two fifths of the
    mma.sync file's time on 2 cores, so one chunk of each file takes both and the rest
    PRIMARY alone (the card the library is tuned on)."""
    if file in FILE_ARCH:
        return ["-cubin", *arch_flags(FILE_ARCH[file])]
    lowest = min(ARCHS)[3:]
    if not every_arch:
        return ["-cubin", f"-gencode=arch=compute_{lowest},code={PRIMARY}"]
    return ["-fatbin", f"-gencode=arch=compute_{lowest},code=[{','.join(ARCHS)}]"]


def test_only_the_arch_specific_kernel_files_branch_on_the_arch():
    for file in sorted({f for f, _ in specializations()} - set(FILE_ARCH)):
        assert "__CUDA_ARCH__" not in source(file), file


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed here")
def test_every_specialisation_compiles(tmp_path):
    jobs = []
    for file in sorted({f for f, _ in specializations()}):
        names = [expr for f, expr in specializations() if f == file]
        for start in range(0, len(names), CHUNK):
            path = tmp_path / f"{file}-{start // CHUNK}.cu"
            path.write_text(instantiating_source(file, names[start:start + CHUNK]))
            jobs.append((path, file, start == 0))
    # the slowest chunks first: the Tensor-Core files'
    jobs.sort(key=lambda job: ("wgmma" not in job[1], "mma" not in job[1]))

    def compile_one(job):
        path, file, every_arch = job
        flags = file_flags(file, every_arch)
        out = path.with_suffix(flags[0].replace("-", "."))
        done = subprocess.run([NVCC, "-std=c++17", *flags, "-Xptxas", "-warn-spills", "-o",
                               str(out), str(path)], capture_output=True, text=True)
        targets = archs(file) if every_arch or file in FILE_ARCH else (PRIMARY,)
        return path.name, "/".join(targets), done.returncode, done.stderr

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(compile_one, jobs))
    failures = [f"{name} for {arch}:\n{err}" for name, arch, rc, err in results if rc != 0]
    assert not failures, "\n".join(failures)


def test_kernel_files_ship_with_the_package():
    kernel_dir = pathlib.Path(source.__globals__["KERNEL_DIR"])
    assert {p.name for p in kernel_dir.glob("*.cu*")} == {"common.cuh", "gemm.cuh", "direct.cu",
                                                           "window.cu", "im2win_conv.cu",
                                                           "im2win_ffma.cu", "wgrad_ffma.cu",
                                                           "im2win_mma.cu", "im2win_wgmma.cu",
                                                           "depthwise.cu", "narrow.cu",
                                                           "hopper.cuh", "narrow_wgmma.cu",
                                                           "narrow_ffma.cu", "rows_wgmma.cu",
                                                           "pointwise.cu", "layout.cu"}


def test_a_variant_copy_compiles_as_its_family(tmp_path, monkeypatch):
    """A dev tool's copy FILE__TAG.cu of a kernel file (timed against it in one process) gets
    the file's headers: source() of a copy im2win_ffma__x.cu is gemm.cuh's and the copy's."""
    from im2win.cuda import plan
    kernel_dir = pathlib.Path(source.__globals__["KERNEL_DIR"])
    for part in kernel_dir.glob("*.cu*"):
        shutil.copy(part, tmp_path / part.name)
    shutil.copy(kernel_dir / "im2win_ffma.cu", tmp_path / "im2win_ffma__x.cu")
    monkeypatch.setitem(source.__globals__, "KERNEL_DIR", tmp_path)
    assert plan.kernel_family("im2win_ffma__x") == "im2win_ffma"
    assert plan.kernel_family("im2win_wgmma") == "im2win_wgmma"
    assert source("im2win_ffma__x") == source("im2win_ffma")
    assert "struct Geometry" in source("im2win_ffma__x")


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed here")
def test_tool_kernels_compile(tmp_path):
    """The kernels of the GPU tools (tools/*.cu: sm_90a probes) compile too."""
    for path in sorted((ROOT_DIR / "tools").glob("*.cu")):
        done = subprocess.run([NVCC, "-std=c++17", "-cubin", *arch_flags("sm_90a"), "-o",
                               str(tmp_path / f"{path.stem}.cubin"), str(path)],
                              capture_output=True, text=True)
        assert done.returncode == 0, f"{path.name}:\n{done.stderr}"


def constexpr(file: str, name: str) -> int:
    """The value of `constexpr int name = <integer expression>;` at the top level of file.cu."""
    found = re.findall(rf"^constexpr int {name} = ([0-9 *+]+);", source(file), re.M)
    assert len(found) == 1, f"{name} in {file}.cu"
    return int(eval(found[0], {"__builtins__": {}}))          # digits, spaces, * and + only


def test_python_constants_match_the_kernel_files():
    """The sizes the Python side plans with that a kernel file also fixes: the same values."""
    from im2win.cuda import plan, wgrad
    assert wgrad.WINDOW_ROW == constexpr("layout", "WINDOW_ROW")
    assert plan.WINDOW_RUN_ROW == constexpr("window", "WINDOW_RUN_ROW")
    assert plan.DEPTHWISE_MMA_TILE == tuple(constexpr("depthwise", f"DEPTHWISE_MMA_{name}")
                                            for name in ("CHANNELS", "ROWS", "COLUMNS"))
    assert plan.DEPTHWISE_MMA_THREADS == constexpr("depthwise", "DEPTHWISE_MMA_THREADS")
    assert plan.DEPTHWISE_MMA_SKEW == constexpr("depthwise", "DEPTHWISE_MMA_SKEW")
    assert wgrad.TABLE == constexpr("im2win_wgmma", "WGRAD_TABLE") + 1024
    assert plan.TRANSPOSE_TILE == constexpr("layout", "TRANSPOSE_TILE")
    assert plan.TRANSPOSE_TAPS_BYTES == constexpr("layout", "TRANSPOSE_TAPS_BYTES")


def emulation(tool: str, args: list[str], capsys) -> None:
    """Run tools/`tool`.py's main with `args`: a kernel compiled with g++ against the tool's
    emulation of the CUDA model, its results checked against float64 (nonzero: one wrong)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(tool, ROOT_DIR / "tools" / f"{tool}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(args) == 0, capsys.readouterr().out


GXX = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed here")


@pytest.fixture(scope="session")
def tsan(tmp_path_factory):
    """Skip unless g++ builds and runs a program with ThreadSanitizer here."""
    src = tmp_path_factory.mktemp("tsan") / "t.cpp"
    src.write_text("#include <thread>\nint main() { std::thread t([] {}); t.join(); }\n")
    exe = src.with_suffix("")
    built = subprocess.run(["g++", "-std=c++20", "-pthread", "-fsanitize=thread", "-o",
                            str(exe), str(src)], capture_output=True)
    if built.returncode or subprocess.run([str(exe)], capture_output=True).returncode:
        pytest.skip("g++ cannot build and run a program with ThreadSanitizer here")


@GXX
def test_depthwise_rows_logic_in_a_cpu_emulation(capsys):
    """depthwise_rows (float32, NHWC and NCHW, in NHWC 0, 1, 2 and 4 input rows copied ahead)
    compiled with g++ against tools/emulate_rows.py's emulation of the CUDA model, its cp.async
    copies done both when issued and as late as the waits allow: every result matches the
    float64 reference. (A slot refilled before its row was read, or a row read before its copy
    was waited for, fails it.)"""
    emulation("emulate_rows", ["--prefetch", "0,1,2,4"], capsys)


@GXX
def test_pointwise_logic_in_a_cpu_emulation(capsys):
    """pointwise.cu's pointwise_nhwc (float16; tiles with tails, zero columns past C, blocks
    looping over tiles) compiled with g++ against tools/emulate_pointwise.py's emulation of the
    CUDA model, ldmatrix and mma.sync included (warp-wide exchanges with the PTX fragment
    layouts): every result matches the float64 reference."""
    emulation("emulate_pointwise", [], capsys)


@GXX
def test_depthwise_tensor_core_logic_in_a_cpu_emulation(capsys):
    """depthwise_mma_nhwc (both A-load forms: a filter row's halves once each, and an
    ldmatrix.x4 a column block) and depthwise_mma_small_nhwc (float16 NHWC, 3x3, 5x5 and 7x7 at
    stride 1; column and channel tails; the small kernel with CB = 1, 2 and 4) compiled with g++
    against tools/emulate_depthwise_mma.py's emulation of the CUDA model, ldmatrix, mma.sync,
    __syncwarp and __byte_perm included: every result matches the float64 reference."""
    emulation("emulate_depthwise_mma", [], capsys)


@GXX
def test_layout_transposes_in_a_cpu_emulation(capsys):
    """layout.cu's transposes (64 x 64 tiles, 16-byte words for 2-byte elements, narrow
    matrices a pass of contiguous rows a block or one element a thread) compiled with g++
    against tools/emulate_layout.py's emulation, each launched as Executable._transpose picks
    and sizes it and again on one block along the dimension its blocks loop over: every
    element moved, bit for bit, nothing else written.
    (A column index off by one, an image skipped by the blocks' loop or a column stride
    ignored fails it.)"""
    emulation("emulate_layout", [], capsys)


@GXX
def test_ffma_tiles_in_a_cpu_emulation(capsys):
    """im2win_ffma.cu (float32 NHWC on CUDA cores: every tile, the 96-filter tiles also with
    each switch off and writing an NCHW y both ways; tails of pixels and filters, padding,
    stride, groups) compiled with g++ against tools/emulate_ffma.py's emulation, on the grids
    the planner's launches take: every result matches the float64 reference. (The 96-filter
    tiles' partial last pass of loads taken as full, or the pipelined loop's barrier dropped,
    fails it.)"""
    emulation("emulate_ffma", [], capsys)


@GXX
def test_narrow_ffma_stems_in_a_cpu_emulation(capsys):
    """narrow_ffma.cu (float32 stems of 1 to 4 channels, NCHW and NHWC: filter tails and
    several filter blocks, padding, strides and dilations by axis, x a view, no bias; the
    planner's tile and tiles of 3 x 5 on fewer blocks than tiles) compiled with g++ against
    tools/emulate_narrow_ffma.py's emulation, its copies done when issued and as late as the
    waits allow: every result matches the float64 reference. (The filter-row barrier dropped,
    the next row copied into the buffer being read, or the barrier between tiles dropped
    fails it.)"""
    emulation("emulate_narrow_ffma", [], capsys)


@GXX
def test_window_runs_in_a_cpu_emulation(capsys):
    """window.cu's window_runs (the window tensor of "im2win_runs", rows padded to 16 bytes:
    x in both layouts, a view with its rows reversed, padding, strides and dilation by axis,
    more than 256 columns; w as K images of one output row) compiled with g++ against
    tools/emulate_window.py's emulation, on the planner's grid and on one and three blocks, its
    copies done when issued and as late as the wait allows: x_win equals the reference's window
    tensor bit for bit, zeros past each row's values, nothing written after it. (The wait
    before the row is written dropped fails it.)"""
    emulation("emulate_window", [], capsys)


@GXX
@pytest.mark.parametrize("tool, args", [("emulate_rows", ["--prefetch", "0,2"]),
                                        ("emulate_pointwise", []),
                                        ("emulate_depthwise_mma", []),
                                        ("emulate_layout", []),
                                        ("emulate_ffma", []),
                                        ("emulate_narrow_ffma", []),
                                        ("emulate_window", [])])
def test_emulated_kernels_have_no_shared_memory_races(tool, args, tsan, monkeypatch, capsys):
    """The emulations again, built with ThreadSanitizer (EMULATE_TSAN): a block's threads are
    OS threads and its barriers std::barrier, so a shared-memory access of one thread that no
    barrier orders against another thread's write (racecheck's hazards on a GPU) fails the run.
    A barrier removed from depthwise_rows or pointwise_nhwc (or transpose_batched's last, or
    window_runs' last) made it fail. im2win_ffma.cu's and narrow_ffma.cu's emulations run each
    kernel form on the first problem that takes it, in each copy timing (the plain runs above
    check every problem)."""
    monkeypatch.setenv("EMULATE_TSAN", "1")
    emulation(tool, args, capsys)
