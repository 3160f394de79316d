"""The performance tooling without a GPU: the asv suite's grids and skips, the ablation script's
tables and JSON, and the performance page generator on a copy of docs/data."""

import importlib.util
import json
import pathlib
import shutil

import pytest

from im2win import bench, cuda
from im2win.cuda import Options

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def suite():
    return load("asv_benchmarks/benchmarks/conv2d.py", "asv_conv2d")


@pytest.fixture(scope="module")
def ablation():
    return load("tools/ablation.py", "ablation_tool")


@pytest.fixture(scope="module")
def make_performance():
    return load("docs/make_performance.py", "make_performance")


def test_asv_grids(suite):
    layers, dtypes, layouts, impls = suite.Conv2dGPU.params
    assert len(layers) == 12 and dtypes == ["float32", "float16", "bfloat16"]
    assert layouts == ["NCHW", "NHWC"]
    assert impls == ["default", "im2win_fused", "im2win", "direct", "im2col_gemm", "cudnn"]
    assert suite.Conv2dCPU.params[3] == ["default", "im2col_gemm"]
    assert suite.Conv2dCPU.param_names == ["layer", "dtype", "layout", "implementation"]


def test_asv_precision_grid_skips_without_a_hopper_gpu(suite):
    assert suite.PrecisionGPU.params[1:] == (["float32", "3xtf32", "tf32"], ["NCHW", "NHWC"])
    assert suite.PrecisionGPU.param_names == ["layer", "precision", "layout"]
    if not cuda.is_available():
        with pytest.raises(NotImplementedError):
            suite.PrecisionGPU().setup("cv12", "3xtf32", "NHWC")


@pytest.mark.parametrize("impl", ["im2win_fused", "im2win", "direct", "cudnn"])
def test_asv_gpu_only_implementations_skip_on_the_cpu(suite, impl):
    with pytest.raises(NotImplementedError):
        suite.implementation(impl, bench.CPU)
    with pytest.raises(NotImplementedError):
        suite.Conv2dCPU().setup("cv12", "float32", "NCHW", impl)


@pytest.mark.skipif(cuda.is_available(), reason="checks the skip without a GPU")
def test_asv_gpu_class_skips_without_a_gpu(suite):
    with pytest.raises(NotImplementedError):
        suite.Conv2dGPU().setup("cv12", "float32", "NCHW", "default")


@pytest.mark.parametrize("impl", ["default", "im2col_gemm"])
def test_asv_cpu_case_runs(suite, impl):
    case = suite.Conv2dCPU()
    args = ("cv12", "float32", "NHWC", impl)
    case.setup(*args)
    case.time_conv2d(*args)
    assert case.track_tflops(*args) > 0
    assert case.track_extra_memory(*args) > 0


def synthetic_rows(ms_of):
    """Rows for two layers and every float32 variant, with `ms_of(layer, variant)` times."""
    return [{"layer": layer, "dtype": "float32", "layout": "NHWC", "variant": variant,
             "ms": ms_of(layer, variant), "tflops": 1.0, "rel_error_vs_full": 0.0,
             "ok": variant != "no_smem" or layer != "cv2"}
            for layer in ("cv1", "cv2") for variant in Options.ablations(tensor_cores=False)]


def test_ablation_record_has_slowdowns_against_the_full_kernel(ablation):
    rows = synthetic_rows(lambda layer, v: 2.0 if v == "full" else 3.0)
    record = ablation.record("python3 tools/ablation.py x.json", {"gpu": "test"}, 128, rows)
    assert record["command"].startswith("python3 tools/ablation.py") and record["batch"] == 128
    slow = {(r["layer"], r["variant"]): r["slowdown"] for r in record["rows"]}
    assert slow["cv1", "full"] == 1.0 and slow["cv2", "no_smem"] == 1.5
    json.dumps(record)                      # serialisable as written


def test_ablation_table_lists_every_variant_and_marks_differences(ablation):
    record = ablation.record("cmd", {}, 128, synthetic_rows(
        lambda layer, v: 1.0 if v == "full" else (4.0 if layer == "cv1" else 1.0)))
    table = ablation.format_table(record["rows"])
    lines = table.splitlines()
    assert lines[0].split() == ["dtype", "layout", "variant", "cv1", "cv2", "geomean"]
    no_smem = next(line for line in lines if "no_smem" in line).split()
    assert no_smem[3:] == ["4.00", "1.00!", "2.00"]
    assert len(lines) == 2 + len(Options.ablations())


def test_ablation_variants_follow_options(ablation):
    assert list(ablation.variants("float16")) == list(Options.ablations(tensor_cores=True))
    assert ablation.variants("float16")["full"] == Options(hopper=False)   # mma.sync
    assert list(ablation.variants("float16-wgmma")) == list(Options.ablations(hopper=True))
    assert list(ablation.variants("float32")) == list(Options.ablations())
    assert {k: d for k, (d, _) in ablation.DTYPES.items()} == {
        "float32": "float32", "float16": "float16", "float16-wgmma": "float16"}


def test_make_performance_writes_page_and_charts_elsewhere(tmp_path, ablation,
                                                           make_performance):
    pytest.importorskip("matplotlib", reason="the charts need matplotlib (the bench extra)")
    data = tmp_path / "data"
    shutil.copytree(ROOT / "docs" / "data", data)
    rows = synthetic_rows(lambda layer, v: 1.0 if v == "full" else 2.0)
    (data / "ablation.json").write_text(json.dumps(
        ablation.record("python3 tools/ablation.py ablation.json", {"gpu": "test GPU"}, 128,
                        rows)))
    out, img = tmp_path / "site" / "performance.md", tmp_path / "site" / "img"
    make_performance.main(["--data", str(data), "--out", str(out), "--img", str(img)])
    page = out.read_text()
    assert "## Ablation" in page and "| no_smem | 2.00 | 2.00 | 2.00 |" in page
    assert "Results that differ from the full kernel's: cv2 float32 NHWC no_smem." in page
    assert "![slowdown of each variant](img/ablation.png)" in page
    for path in sorted(data.glob("gpu-float*.json")):
        if path.stem.endswith("tf32"):       # the precision table, no charts of its own
            assert "| layer | 3xtf32 TFLOPS | tf32 TFLOPS |" in page
            continue
        if "-backward_" in path.stem:        # the gradients' tables, no charts either
            assert "### The gradients (issue 13)" in page and \
                json.loads(path.read_text())["command"].split(" --json")[0] in page
            continue
        assert f"](img/{path.stem}-tflops.png)" in page
        assert (img / f"{path.stem}-memory.png").stat().st_size > 0
    first = (img / "ablation.png").read_bytes()
    make_performance.main(["--data", str(data), "--out", str(out), "--img", str(img)])
    assert (img / "ablation.png").read_bytes() == first            # same JSON, same PNG


def test_make_performance_skips_missing_files(tmp_path, make_performance):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(ROOT / "docs" / "data" / "cpu-float32-NCHW.json", data)
    make_performance.build(data, tmp_path / "p.md", tmp_path / "img")
    page = (tmp_path / "p.md").read_text()
    assert "## CPU path" in page and "## GPU" not in page and "Ablation" not in page


def test_asv_section_summarises_the_committed_results(tmp_path, make_performance):
    """The asv section's tables are the geometric means of the two newest h200 result files,
    one row per (dtype, layout) each, and the compare output is quoted with the commits it
    names."""
    results = ROOT / "asv_benchmarks" / "results"
    if not list(results.glob("h200/*-existing-*.json")):
        pytest.skip("no asv results of machine h200 are committed")
    compare = tmp_path / "asv-compare.log"
    compare.write_text("| Change | Before [aaaa1111] <main~1> | After [bbbb2222] <main> |\n")
    text = make_performance.asv_section(results, compare)
    rows = [line for line in text.splitlines() if line.startswith("| float")]
    tables = min(2, len(list(results.glob("h200/*-existing-*.json"))))
    assert [row.split(" | ")[:2] for row in rows] == tables * [
        ["| float32", "NCHW"], ["| float32", "NHWC"], ["| float16", "NCHW"], ["| float16", "NHWC"]]
    assert "`asv compare aaaa1111 bbbb2222`" in text and "Before [aaaa1111]" in text
    assert "Not recorded at this commit:" in text
    assert make_performance.asv_section(tmp_path, compare) is None
    (tmp_path / "h200").mkdir()         # a newer result without track_tflops is passed over
    newer = dict(commit_hash="c" * 40, date=2**50, result_columns=["result", "params"],
                 results={})
    (tmp_path / "h200" / "cccccccc-existing-py.json").write_text(json.dumps(newer))
    assert make_performance.asv_section(tmp_path, compare) is None


def test_suite_section_summarises_classes_and_networks(tmp_path, make_performance):
    """Two synthetic networks' records: class ratios are geometric means of cuDNN time over
    im2win time per layer, networks the ratio of their total times (bench.suite_summary), one
    call at a time (time_ms) and back to back (gpu_ms: im2win's half its single time here)."""
    def record(net, layers, dtype):
        rows = [dict(layer=name, impl=impl, time_ms=t, gpu_ms=t / 2 if impl == "im2win" else t)
                for name, (ours, theirs) in layers.items()
                for impl, t in (("im2win", ours), ("cudnn", theirs))]
        return dict(command=f"python -m im2win --suite {net} --compare --dtype {dtype} "
                            f"--layout NHWC --json x.json", date="2026-12-01T00:00:00",
                    dtype=dtype, layout="NHWC", machine={"gpu": "test GPU"}, rows=rows)
    paths = []
    for net, layers in (("mobilenet_v2", {"mobilenet_v2.1": (1.0, 4.0)}),      # depthwise
                        ("resnet50", {"resnet50.1": (2.0, 1.0)})):            # a 1x1
        paths.append(tmp_path / f"suite-{net}-float16-NHWC.json")
        paths[-1].write_text(json.dumps(record(net, layers, "float16")))
    text = make_performance.suite_section(paths)
    assert "| depthwise | 4.00x (1, 4.00x) | 8.00x (1, 8.00x) |" in text
    assert "| 1x1 | 0.50x (1, 0.50x) | 1.00x (1, 1.00x) |" in text
    assert "| **all** | **1.41x** (2) | **2.83x** (2) |" in text
    assert "| resnet50 | 0.50x (2.00 ms / 1.00 ms) | 1.00x (1.00 ms / 1.00 ms) |" in text
    assert "| | float16 NHWC, one call at a time | float16 NHWC, back to back |" in text
    assert "`python -m im2win --suite NETWORK --compare --dtype float16 --layout NHWC`" in text


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed here")
def test_sass_counts_a_kernels_instructions(capsys):
    """tools/sass.py compiles two specialisations side by side and counts their machine code:
    cv8's resident-filter kernel and its PROBE 32 form (the straight-line stores of whole
    tiles: 16 more stores, one a 64-row half, 8-row group and 32 filters, beside the general
    path's)."""
    sass = load("tools/sass.py", "sass_tool")
    try:
        sass.tool("cuobjdump"), sass.tool("nvdisasm")
    except SystemExit as e:
        pytest.skip(str(e))
    kernel = "im2win_wgmma:im2win_wgmma_tma<half_t, 128, 128, 5, true, true, true, false{}>"
    assert sass.main([kernel.format(""), kernel.format(", 32"), "--ops", "HGMMA,STG"]) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()
            if line and not line.startswith(("[", " "))}
    assert rows["spills"] == ["st/ld", "0/0", "0/0"]
    assert all(int(r) <= 168 for r in rows["registers"])   # 384 threads a block: 65536 / 384
    # 4 k-steps of a 64-deep slice, two 64-row halves: 8 wgmmas in the main loop's body
    assert rows["HGMMA"] == ["8", "8"]
    stg = [int(v) for v in rows["STG"]]
    assert stg[1] - stg[0] == 16
