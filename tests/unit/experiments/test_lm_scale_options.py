"""benchmarks/lm_scale.py's options: a bad value is argparse's one-line usage error (exit 2), before
any corpus is generated or any job submitted."""

from __future__ import annotations

import pytest
from support import benchmark_usage_error


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
    done = benchmark_usage_error("lm_scale.py", "--work", str(tmp_path / "w"), *args)
    assert message in done.stderr, done.stderr
    assert not (tmp_path / "w").exists()
