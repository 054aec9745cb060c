"""Types: mypy over orchestrator/ and experiments/, as configured in pyproject.toml ([tool.mypy])."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support import ROOT, skip_or_fail


# Cold (no .mypy_cache: a fresh clone) it reads torch's and lightning's stubs, most of its
# time; warm, mypy's incremental cache at the repository's root leaves it a few seconds.
@pytest.mark.slow
def test_mypy_passes():
    if subprocess.run([sys.executable, "-m", "mypy", "--version"], capture_output=True).returncode != 0:
        skip_or_fail("mypy is not installed (the test extra has it: pip install -e '.[test]')")
    # No paths: the config's `files`; its cache_dir, relative to the root, is what makes a re-run quick.
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
