"""benchmarks/gpu_mfu.py's options: a bad value is argparse's one-line usage error (exit 2), before
torch is imported or any run starts."""

from __future__ import annotations

import pytest
from support import benchmark_usage_error


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--val-rows", "-1"], "--val-rows -1: give 0 (all of the split) or more"),
        (["--val-rows", "few"], "argument --val-rows: invalid int value: 'few'"),
        (["--command-options", "--residual fp32 '"], '--command-options "--residual fp32 \'": No closing quotation'),
    ],
)
def test_a_bad_option_is_one_usage_line(args, message, tmp_path):
    done = benchmark_usage_error("gpu_mfu.py", *args, "--out", str(tmp_path / "out.json"))
    assert message in done.stderr, done.stderr
    # argparse's usage (several lines: the script has many options), then the one error line.
    assert done.stderr.count("error:") == 1 and done.stderr.strip().splitlines()[-1].startswith("gpu_mfu.py: error: ")
    assert not (tmp_path / "out.json").exists()
