"""benchmarks/waves.py's options: a bad value is argparse's one-line usage error (exit 2), before the
testbed is asked for or the user's MaxSubmitJobs is touched."""

from __future__ import annotations

import pytest
from support import benchmark_usage_error


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--items", "0"], "--items >= 1, --max-submit >= 2 (an item and the recording job), --sleep >= 0"),
        (["--max-submit", "1"], "--items >= 1, --max-submit >= 2 (an item and the recording job), --sleep >= 0"),
        (["--max-submit", "many"], "argument --max-submit: invalid int value: 'many'"),
        (["--sleep", "-1"], "--sleep >= 0"),
    ],
)
def test_a_bad_option_is_one_usage_line(args, message):
    done = benchmark_usage_error("waves.py", *args)
    assert message in done.stderr, done.stderr
    assert done.stderr.count("\n") <= 2  # usage and the one line
