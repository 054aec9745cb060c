"""Types: mypy over orchestrator/ and experiments/, as configured in pyproject.toml ([tool.mypy])."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT, skip_or_fail


def cache_dir() -> Path:
    """mypy's incremental cache for the tests: in the user's cache folder, so that a fresh clone starts warm.

    Cold, mypy reads torch's and lightning's stubs, most of its time; their paths and contents are the
    same from any clone. mypy checks every cached module against its source (size, then hash) before
    using it, so a cache written from another clone or an older tree only costs the modules that differ.
    """
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "orchestrator-tests" / "mypy"


@pytest.mark.slow
def test_mypy_passes():
    if subprocess.run([sys.executable, "-m", "mypy", "--version"], capture_output=True).returncode != 0:
        skip_or_fail("mypy is not installed (the test extra has it: pip install -e '.[test]')")
    # No paths: the config's `files`; only the cache's place differs from a plain `mypy`.
    argv = [sys.executable, "-m", "mypy", "--cache-dir", str(cache_dir())]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
