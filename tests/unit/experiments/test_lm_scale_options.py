"""benchmarks/lm_scale.py's options: a bad value is argparse's one-line usage error (exit 2), before
any corpus is generated or any job submitted."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support import ROOT


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shard-counts", "x"], "argument --shard-counts: 'x' is not a whole number"),
        (["--shard-counts", "1,0"], "argument --shard-counts: '0': must be at least 1"),
        (["--large", "2Q"], "argument --large: '2Q' is not a size"),
        (["--steps", "-1"], "argument --steps: '-1': must be at least 1"),
    ],
)
def test_a_bad_option_is_one_usage_line(tmp_path, args, message):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/lm_scale.py"), "--work", str(tmp_path / "w"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "w").exists()
