"""The benchmark command and the asv suite: they run, check results, and report failures."""

import importlib.util
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from im2win import bench, cuda

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_bench_prints_a_checked_table_and_writes_json(tmp_path, capsys):
    path = tmp_path / "bench.json"
    status = bench.main(["--layers", "cv12,cv7", "--batch", "2", "--device", "cpu",
                         "--compare", "--layout", "NHWC", "--json", str(path)])
    out = capsys.readouterr().out
    assert status == 0
    assert "4 of 4 results correct" in out and "geometric mean, im2col+gemm" in out
    record = json.loads(path.read_text())
    assert record["batch"] == 2 and record["layout"] == "NHWC"
    assert [(r["layer"], r["impl"]) for r in record["rows"]] == [
        ("cv12", "im2win"), ("cv12", "im2col+gemm"), ("cv7", "im2win"), ("cv7", "im2col+gemm")]
    for row in record["rows"]:
        assert row["ok"] and row["rel_error"] <= row["allowed_error"]
        assert row["time_ms"] > 0 and row["tflops"] > 0
    gflop = {r["layer"]: r["gflop"] for r in record["rows"]}
    assert gflop == pytest.approx({"cv12": 2 * 2 * 512 * 5 * 5 * 512 * 9 / 1e9,
                                   "cv7": 2 * 2 * 64 * 222 * 222 * 3 * 9 / 1e9})


def test_bench_runs_bfloat16(capsys):
    status = bench.main(["--layers", "cv12", "--batch", "1", "--device", "cpu", "--compare",
                         "--dtype", "bfloat16", "--layout", "NHWC"])
    out = capsys.readouterr().out
    assert status == 0 and "2 of 2 results correct" in out and "bfloat16" in out


@pytest.mark.parametrize("op", ["backward_data", "backward_filter"])
def test_bench_times_and_checks_the_gradients(tmp_path, capsys, op):
    path = tmp_path / "bench.json"
    status = bench.main(["--op", op, "--layers", "cv12", "--batch", "2", "--device", "cpu",
                         "--layout", "NHWC", "--json", str(path)])
    assert status == 0 and "1 of 1 results correct" in capsys.readouterr().out
    record = json.loads(path.read_text())
    assert record["op"] == op and record["rows"][0]["impl"] == "im2win"
    assert record["rows"][0]["gflop"] == pytest.approx(2 * 2 * 512 * 5 * 5 * 512 * 9 / 1e9)


def test_bench_fails_on_a_wrong_result(monkeypatch, capsys):
    def off_by_a_little(x, w, **kwargs):
        y = bench.im2win.conv2d(x, w, **kwargs)
        y[0, 0, 0, 0] += 1e-3 * np.abs(y).max()
        return y
    monkeypatch.setattr(bench, "implementations",
                        lambda device, compare, dtype, precision: {"im2win": off_by_a_little})
    assert bench.main(["--layers", "cv12", "--batch", "1", "--device", "cpu"]) == 1
    assert "WRONG: cv12/im2win" in capsys.readouterr().out


def test_cpu_extra_memory_counts_temporaries_not_the_result():
    assert bench.CPU.extra_memory(lambda: np.ones(1 << 20)) < 4096
    def temporary():
        np.ones(1 << 20).sum()
        return np.ones(8)
    assert bench.CPU.extra_memory(temporary) >= 8 << 20


@pytest.mark.parametrize("argv", [["--layers", "cv13"], ["--batch", "0"], ["--dtype", "int8"],
                                  ["--device", "tpu"], ["run"], ["--op", "sideways"],
                                  ["--op", "backward_data", "--precision", "tf32"]])
def test_bench_rejects_bad_options(argv):
    with pytest.raises(SystemExit) as err:
        bench.main(argv)
    assert err.value.code == 2


@pytest.mark.skipif(cuda.is_available(), reason="checks the message shown without a GPU")
def test_bench_gpu_request_is_refused_clearly(capsys):
    assert bench.main(["--device", "gpu"]) == 2
    assert "no GPU is visible" in capsys.readouterr().err


def test_module_entry_point_runs():
    result = subprocess.run([sys.executable, "-m", "im2win", "--help"], capture_output=True,
                            text=True, check=True)
    assert "--compare" in result.stdout


def load_asv_suite():
    path = ROOT / "asv_benchmarks" / "benchmarks" / "conv2d.py"
    spec = importlib.util.spec_from_file_location("asv_conv2d", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_asv_config_uses_the_existing_environment():
    text = (ROOT / "asv_benchmarks" / "asv.conf.json").read_text()
    assert '"environment_type": "existing"' in text


def test_asv_suite_runs_a_cpu_case_and_skips_gpu_without_one():
    module = load_asv_suite()
    suite = module.Conv2dCPU()
    args = ("cv12", "float32", "NHWC", "default")
    suite.setup(*args)
    suite.time_conv2d(*args)
    assert suite.track_tflops(*args) > 0
    assert suite.track_extra_memory(*args) > 0      # the block's window and gathered runs
    assert suite.track_tflops.unit == "TFLOPS" and suite.track_extra_memory.unit == "bytes"
    if not cuda.is_available():
        with pytest.raises(NotImplementedError):
            module.Conv2dGPU().setup("cv12", "float32", "NCHW", "default")


def test_network_suite_runs_layers_with_their_hyper_parameters(tmp_path, capsys):
    path = tmp_path / "suite.json"
    status = bench.main(["--suite", "mobilenet_v2", "--layers",
                         "mobilenet_v2.0,mobilenet_v2.1,mobilenet_v2.2", "--batch", "1",
                         "--device", "cpu", "--compare", "--json", str(path)])
    out = capsys.readouterr().out
    assert status == 0 and "6 of 6 results correct" in out
    assert "by layer class" in out and "by network" in out
    record = json.loads(path.read_text())
    assert record["suite"] == "mobilenet_v2"
    summary = record["summary"]
    assert summary["baseline"] == "im2col+gemm"
    assert set(summary["kinds"]) == {"stem", "strided", "depthwise", "1x1"}
    assert summary["all"]["layers"] == 3
    # a class of one layer: its geometric mean (exp of a mean of logs) may be an ulp below it
    assert all(v["slowest"] <= v["speedup"] * (1 + 1e-12) for v in summary["kinds"].values())
    assert list(summary["networks"]) == ["mobilenet_v2"]
    from im2win.networks import NETWORKS
    convs = {c.name: c for c in NETWORKS["mobilenet_v2"]}
    times = {(r["layer"], r["impl"]): r["time_ms"] for r in record["rows"]}
    ours = sum(convs[n].count * times[n, "im2win"] for n in convs if (n, "im2win") in times)
    assert summary["networks"]["mobilenet_v2"]["im2win_ms"] == pytest.approx(ours)


def test_network_data_are_consistent():
    """Every entry is a valid convolution; the counts add up to the networks' Conv2d layers."""
    from im2win.networks import NETWORKS
    from im2win.problem import make_problem
    totals = {"resnet50": 53, "mobilenet_v2": 52, "efficientnet_b0": 81, "convnext_tiny": 22,
              "resnext50_32x4d": 53}
    assert {net: sum(c.count for c in convs) for net, convs in NETWORKS.items()} == totals
    for convs in NETWORKS.values():
        for conv in convs:
            x_shape, w_shape = conv.shapes(1, "NHWC")
            make_problem(np.empty(x_shape, np.float32), np.empty(w_shape, np.float32),
                         layout="NHWC", **conv.kwargs)


def test_a_native_implementation_gets_its_arrays_once_outside_the_timed_call():
    """cuDNN is timed as a PyTorch user calls it: the conversion to its arrays happens once per
    input in bind, never in the timed call; the first result comes back converted."""
    adopted, calls = [], []

    class Wrapped:
        def __init__(self, a):
            self.a = a

    def adopt(a, layout):
        adopted.append(a)
        return Wrapped(a)

    def run(x, w, *, layout, stride):
        assert isinstance(x, Wrapped) and isinstance(w, Wrapped)
        calls.append(x.a)
        return Wrapped(x.a * stride + w.a)

    native = bench.Native(adopt, run, lambda y, layout: y.a)
    inputs = [np.full(2, 1.0), np.full(2, 2.0)]
    call, first = bench.bind(native, inputs, np.full(2, 10.0), "NCHW", dict(stride=3))
    assert len(adopted) == 3
    for _ in range(5):
        call()
    assert len(adopted) == 3 and [c[0] for c in calls] == [1, 2, 1, 2, 1]
    np.testing.assert_array_equal(first(), np.full(2, 13.0))
    plain_call, plain_first = bench.bind(lambda x, w, layout, stride: x + w, inputs,
                                         np.ones(2), "NCHW", dict(stride=1))
    np.testing.assert_array_equal(plain_first(), np.full(2, 2.0))
    np.testing.assert_array_equal(plain_call(), np.full(2, 2.0))


def test_precision_adds_the_float32_path_and_its_own_error_bound():
    from im2win.testing import allowed_error
    impls = bench.implementations(bench.CPU, True, "float32", "3xtf32")
    assert impls["im2win"].keywords == {"precision": "3xtf32"}
    assert impls["im2win-float32"] is bench.im2win.conv2d
    assert list(bench.implementations(bench.CPU, False, "float32")) == ["im2win"]
    assert allowed_error(np.float32, 576, "tf32") > allowed_error(np.float32, 576, "3xtf32") \
        == allowed_error(np.float32, 576)
