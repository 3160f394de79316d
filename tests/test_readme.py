"""The README's set-up commands are the ones CI and users actually run."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def readme_commands():
    block = re.search(r"## Set-up: two commands.*?```bash\n(.*?)```", (ROOT / "README.md")
                      .read_text(), re.S).group(1)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]


def test_readme_has_two_commands_bench_then_tests():
    bench, tests = readme_commands()
    assert bench.endswith("python3 -m im2win") and "pytest" in tests


def test_ci_runs_the_readme_test_command():
    assert readme_commands()[1] in (ROOT / ".ci" / "run").read_text().splitlines()
