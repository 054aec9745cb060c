"""`orchestrator profile-diff` (orchestrator/cli/profile_diff.py): bad input is one message and
exit 2; the command stays off torch and is listed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support import invoke, write_operators


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: d / "missing", "no such file or folder"),
        (lambda d: d, "no profile/operators.json in"),
        (lambda d: _write(d / "x.json", "{not json"), "not readable JSON"),
        (lambda d: _write(d / "x.json", '{"steps": 2, "operators": {"a": {"calls": 1}}}'), "not an operators.json"),
        (lambda d: _write(d / "x.json", '{"steps": 0, "operators": {}}'), "steps must be a positive integer"),
        (lambda d: _write(d / "x.json", "[1, 2]"), "not an operators.json"),
    ],
)
def test_bad_input_is_one_message_and_exit_2(tmp_path, setup, message):
    good = write_operators(tmp_path / "good.json", {"aten::mm": (1, 2)})
    bad = setup(tmp_path)
    for args in ([str(bad), str(good)], [str(good), str(bad), "--json"]):
        result = invoke("profile-diff", *args)
        assert result.exit_code == 2, result.output
        assert message in result.output and "Traceback" not in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_the_comparison_stays_off_torch_and_is_listed():
    code = (
        "import sys, orchestrator.cli, orchestrator.analysis.opdiff, orchestrator.cli.profile_diff; "
        "print(sorted(m for m in ('torch', 'pytorch_lightning', 'lightning', 'numpy', 'rich') if m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"
    result = invoke("--help")
    assert "profile-diff" in result.output
