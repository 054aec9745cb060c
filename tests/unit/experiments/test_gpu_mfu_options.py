"""benchmarks/gpu_mfu.py's options (and gpu_wheels.py's, which prepares its lease): a bad value is
argparse's one-line usage error (exit 2), before torch is imported or any run starts."""

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


@pytest.mark.parametrize(
    ("text", "message"),
    [(None, "cannot read it (No such file or directory)"), ("# no list here\n", "no 'Packages:' line")],
)
def test_the_wheel_helper_refuses_a_package_list_it_cannot_use_before_downloading(text, message, tmp_path):
    listing = tmp_path / "KINDS.md"
    if text is not None:
        listing.write_text(text)
    done = benchmark_usage_error("gpu_wheels.py", str(listing), "--out", str(tmp_path / "wheels"))
    assert message in done.stderr and done.stderr.count("error:") == 1, done.stderr
    assert not (tmp_path / "wheels").exists()
