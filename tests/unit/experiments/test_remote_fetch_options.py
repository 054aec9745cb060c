"""benchmarks/remote_fetch.py's options: a bad value is argparse's one-line usage error (exit 2), before
any sshd is started or any project made; its JSON is not written."""

from __future__ import annotations

import pytest
from support import benchmark_usage_error


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--items", "0"], "argument --items: '0': must be at least 1"),
        (["--items", "many"], "argument --items: 'many' is not a whole number"),
        (["--files", "-2"], "argument --files: '-2': must be at least 1"),
        (["--size", "4Q"], "argument --size: '4Q' is not a size"),
        (["--size", "0"], "argument --size: '0': the size must be at least 1 byte"),
    ],
)
def test_a_bad_option_is_one_usage_line(tmp_path, args, message):
    out = tmp_path / "figures.json"
    done = benchmark_usage_error("remote_fetch.py", "--json", str(out), *args)
    assert message in done.stderr, done.stderr
    assert not out.exists()
