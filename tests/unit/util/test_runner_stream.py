"""SubprocessRunner.stream and stop_signals (orchestrator/util/runner.py), with real processes:
lines handed on as they come, the whole process group stopped on a time-out or an exception,
and SIGTERM/SIGHUP/SIGINT turned into Stopped once."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.util import runner as runner_module
from orchestrator.util.runner import Stopped, SubprocessRunner, stop_signals


def running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_lines_arrive_while_the_command_runs():
    seen: list[tuple[str, float]] = []
    start = time.monotonic()
    rc = SubprocessRunner().stream(
        ["sh", "-c", "echo one; sleep 1; echo two >&2; printf 'no end'"], lambda line: seen.append((line, time.monotonic() - start))
    )
    assert rc == 0 and [line for line, _ in seen] == ["one", "two", "no end"]  # stderr merged, the last partial line too
    assert seen[0][1] < 0.8 <= seen[1][1]  # the first line came before the command slept


def test_exit_status_env_and_start():
    seen: list[str] = []
    pids: list[int] = []
    rc = SubprocessRunner().stream(["sh", "-c", 'echo "$ONLY_HERE"; exit 3'], seen.append, env={"ONLY_HERE": "yes"}, on_start=pids.append)
    assert rc == 3 and seen == ["yes"] and len(pids) == 1 and "ONLY_HERE" not in os.environ


def test_undecodable_bytes_and_carriage_returns():
    seen: list[str] = []
    SubprocessRunner().stream(["printf", "a\\377b\\r\\nbar 1\\rbar 2\\n"], seen.append)
    assert seen == ["a\ufffdb", "bar 1\rbar 2"]


def test_a_timeout_stops_the_whole_process_group(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_module, "GRACE_S", 2.0)
    pidfile = tmp_path / "pid"
    # the grandchild ignores SIGTERM: only the SIGKILL after the grace period ends it
    script = f"(trap '' TERM; sleep 60) & echo $! > {pidfile}; echo started; wait"
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        SubprocessRunner().stream(["sh", "-c", script], lambda line: None, timeout=1)
    assert time.monotonic() - start < 10
    time.sleep(0.2)
    assert not running(int(pidfile.read_text()))


def test_an_exception_in_the_caller_stops_the_child_and_propagates(tmp_path):
    pidfile = tmp_path / "pid"

    def on_line(line):
        if line == "started":
            raise Stopped(signal.SIGTERM)

    with pytest.raises(Stopped):
        SubprocessRunner().stream(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; echo started; wait"], on_line)
    time.sleep(0.2)
    assert not running(int(pidfile.read_text()))


def test_a_command_that_leaves_a_child_holding_the_pipe_still_returns():
    start = time.monotonic()
    rc = SubprocessRunner().stream(["sh", "-c", "sleep 30 & echo bye"], lambda line: None, timeout=20)
    assert rc == 0 and time.monotonic() - start < 5


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_stop_signals_raise_stopped_once_then_restore(signum):
    before = signal.getsignal(signum)
    with pytest.raises(Stopped) as stop:
        with stop_signals():
            os.kill(os.getpid(), signum)
            time.sleep(5)  # interrupted by the handler
    assert stop.value.signum == signum and stop.value.exit_code == 128 + signum and stop.value.name == signal.Signals(signum).name
    assert signal.getsignal(signum) == before


def test_a_second_signal_does_not_cut_the_cleanup_short():
    cleaned = []
    with pytest.raises(Stopped):
        with stop_signals():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            finally:
                os.kill(os.getpid(), signal.SIGTERM)  # ignored: the cleanup below runs
                time.sleep(0.1)
                cleaned.append(True)
    assert cleaned == [True]
