"""The README stays true: its quickstart has exactly two commands and its Python example runs."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)


def test_quickstart_has_exactly_two_commands():
    quick = README.read_text(encoding="utf-8").split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = re.findall(r"```bash\n(.*?)```", quick, re.DOTALL)
    assert len(block) == 1
    commands = [ln.split("#")[0].strip() for ln in block[0].splitlines() if ln.split("#")[0].strip()]
    assert commands == ["make eval", "make test"]


def test_python_example_runs_and_scores_the_gold():
    code = _blocks("python")[0]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "1.0 1.0 1.0"


def test_vector_env_example_runs_as_printed():
    code = _blocks("python")[1]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-2:] == ["[ 0. nan nan nan]", "1 1"]
