"""The examples run (where their libraries are there) and check their own results."""

import pathlib
import runpy
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_resnet50_example_matches_pytorch_on_the_cpu(monkeypatch, capsys):
    try:
        import torchvision  # noqa: F401
    except Exception as err:             # not installed, or a torch it was not built for
        pytest.skip(f"needs torch and torchvision: {err}")
    monkeypatch.setattr(sys, "argv", ["resnet50.py", "--batch", "1", "--device", "cpu"])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(ROOT / "examples" / "resnet50.py"), run_name="__main__")
    assert done.value.code == 0
    assert "ResNet-50 forward, batch 1, float32 NCHW on cpu" in capsys.readouterr().out
