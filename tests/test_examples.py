"""The examples run (where their libraries are there) and check their own results."""

import pathlib
import runpy
import sys

import pytest

import im2win

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_resnet50_example_matches_pytorch_on_the_cpu(monkeypatch, capsys):
    try:
        import torch  # noqa: F401
    except Exception as err:
        pytest.skip(f"needs torch: {err}")
    monkeypatch.setattr(sys, "argv", ["resnet50.py", "--batch", "1", "--device", "cpu"])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(ROOT / "examples" / "resnet50.py"), run_name="__main__")
    assert done.value.code == 0
    assert "ResNet-50 forward, batch 1, float32 NCHW on cpu" in capsys.readouterr().out


def test_resnet50_example_matches_pytorch_on_the_gpu(monkeypatch, capsys):
    try:
        import torch
    except Exception as err:
        pytest.skip(f"needs torch: {err}")
    if not (torch.cuda.is_available() and im2win.cuda.is_available()):
        pytest.skip("needs CuPy and a visible CUDA GPU; none here")
    monkeypatch.setattr(sys, "argv", ["resnet50.py", "--batch", "2", "--dtype", "float16"])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(ROOT / "examples" / "resnet50.py"), run_name="__main__")
    assert done.value.code == 0
    assert "ResNet-50 forward, batch 2, float16 NHWC on cuda" in capsys.readouterr().out
