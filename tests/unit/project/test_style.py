"""Lint and format: ruff over the whole project, as configured in pyproject.toml."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from support import ROOT, skip_or_fail


def ruff(*args: str) -> subprocess.CompletedProcess:
    if shutil.which("ruff") is None and subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True).returncode != 0:
        skip_or_fail("ruff is not installed (the test extra has it: pip install -e '.[test]')")
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("args", [("check", "--no-cache", "."), ("format", "--no-cache", "--check", ".")], ids=["lint", "format"])
def test_ruff_passes(args):
    done = ruff(*args)
    assert done.returncode == 0, done.stdout + done.stderr
