"""Following a remote command over the loopback sshd, with a stand-in `orchestrator` on the login
node (the real one for --version and `remote checkout`, a slow printer for the rest): the exit
status passed through, a master connection killed mid-stream (reconnects, every line once), Ctrl-C
(stops only the following; `remote attach` picks it up), a second submit while one runs (follows
it: one run). The `login` fixture: conftest.py beside this."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import one_error

pytestmark = pytest.mark.ssh

LINES = 30


def slow_orchestrator(where: Path, gate: Path) -> Path:
    """An `orchestrator` that prints LINES numbered lines 0.2 s apart and exits 3, except for
    --version and `remote ...`, which the real one answers. When a file `hold` sits beside
    `gate`, it waits after line 5 (up to a minute) for `gate` to exist: a test that must act while
    it runs opens the gate when done, instead of racing a fixed run time on a loaded machine."""
    where.mkdir()
    script = where / "orchestrator"
    script.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --version|remote) exec {sys.executable} -m orchestrator "$@";; esac\n'
        f'i=0; while [ $i -lt {LINES} ]; do echo "line $i of $*"; i=$((i+1)); sleep 0.2\n'
        f"  if [ $i = 6 ] && [ -e {gate.parent}/hold ]; then w=0\n"
        f"    while [ ! -e {gate} ] && [ $w -lt 600 ]; do sleep 0.1; w=$((w+1)); done\n"
        "  fi\n"
        "done\n"
        "exit 3\n"
    )
    script.chmod(0o755)
    return where


@pytest.fixture
def slow(login, tmp_path):
    login.set_setup([f"export PATH={slow_orchestrator(tmp_path / 'bin', tmp_path / 'gate' / 'open')}:$PATH"])
    return login.workstation(tmp_path / "ws" / "proj")


def _logs(login, name: str) -> list[Path]:
    return sorted((login.cluster_root / "proj" / ".orchestrator" / "remote").glob(f"*-{name}-*/log"))


def _wait_for(login, name: str, text: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not any(text in p.read_text() for p in _logs(login, name)):
        assert time.monotonic() < deadline, f"{text!r} never appeared in the remote log"
        time.sleep(0.02)


def _hold(tmp_path: Path) -> Path:
    """Make the stand-in there wait after line 5 (see slow_orchestrator); touch the returned
    path to let it go on. A test that acts while the command runs holds it, so that a loaded
    machine cannot let the 6-second command end first."""
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "hold").touch()
    return gate / "open"


def _read_until(stream, text: str) -> str:
    """What ``stream`` (a client's stdout or stderr) said up to the line holding ``text``."""
    said = ""
    while text not in said:
        line = stream.readline()
        assert line, f"the client ended before saying {text!r}: {said}"
        said += line
    return said


def _signal_state(pid: int) -> str:
    """The process's blocked, ignored and caught signals, threads and wait channel (/proc)."""
    proc = Path(f"/proc/{pid}")
    status = [line for line in (proc / "status").read_text().splitlines() if line.startswith(("SigBlk", "SigIgn", "SigCgt", "Threads"))]
    return f"{status}, wchan {(proc / 'wchan').read_text()!r}, children {(proc / 'task' / str(pid) / 'children').read_text()!r}"


def _every_line_once(stdout: str, what: str) -> None:
    lines = [line for line in stdout.splitlines() if line.startswith("line ")]
    assert lines == [f"line {i} of {what}" for i in range(LINES)], stdout


def test_exit_status_and_output_come_through(login, slow):
    (login.cluster_root / "proj").mkdir(parents=True)
    done = login.orchestrator("status", "--remote", "probe", cwd=slow)
    assert done.returncode == 3, done.stdout + done.stderr
    _every_line_once(done.stdout, "status -- probe")  # the targets after `--` there: none becomes an option


def test_a_killed_master_connection_reconnects_and_every_line_comes_once(login, slow, tmp_path):
    (login.cluster_root / "proj").mkdir(parents=True)
    release = _hold(tmp_path)  # until the connection has been cut
    client = login.popen("status", "--remote", cwd=slow)
    seen = _read_until(client.stdout, "line 5 of")
    login.stop_master()
    release.touch()
    out, err = client.communicate(timeout=120)
    assert client.returncode == 3, seen + out + err
    assert "dropped; reconnecting" in err
    _every_line_once(seen + out, "status")


def test_ctrl_c_stops_only_the_following_and_attach_picks_it_up(login, slow, tmp_path):
    (login.cluster_root / "proj").mkdir(parents=True)
    release = _hold(tmp_path)  # the Ctrl-C lands while the command there runs
    client = login.popen("status", "--remote", cwd=slow)
    seen = _read_until(client.stdout, "line 3 of")  # Ctrl-C once the user sees it following
    state = _signal_state(client.pid)
    client.send_signal(signal.SIGINT)
    try:
        out, err = client.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # say what the client did with the signal (ignored, blocked, caught)
        pytest.fail(f"the client went on after Ctrl-C; before it: {state}; now: {_signal_state(client.pid)}")
    release.touch()
    assert client.returncode == 130, seen + out + err
    assert "nothing was stopped on the cluster" in err and "goes on on login-node" in err and "orchestrator remote attach" in err
    attached = login.orchestrator("remote", "attach", cwd=slow)
    assert attached.returncode == 3, attached.stdout + attached.stderr
    _every_line_once(attached.stdout, "status")  # from the start, to the end


def test_a_second_submit_while_one_runs_follows_it_then_runs_after_it(login, slow, tmp_path):
    release = _hold(tmp_path)  # the first submit there, until the second follows it
    first = login.popen("submit", "--remote", cwd=slow)
    _wait_for(login, "submit", "line 3 of")
    login.stop_master()
    first.kill()  # the workstation's side is gone; the submit there goes on
    first.communicate()
    second = login.popen("submit", "--remote", cwd=slow)
    said = _read_until(second.stderr, "still running on login-node")
    assert len(_logs(login, "submit")) == 1  # it waits: nothing sent, nothing started while the first runs
    release.touch()
    out, err = second.communicate(timeout=120)
    said += err
    assert second.returncode == 3, out + said
    assert "this one is sent and runs after it" in said and "checked out" in said, said
    assert out.splitlines().count(f"line {LINES - 1} of submit") == 2, out  # the first followed to its end, then its own run
    assert len(_logs(login, "submit")) == 2  # one after the other, never two at once
    # With none running, the next submit runs at once (syncing first).
    third = login.orchestrator("submit", "--remote", cwd=slow)
    assert third.returncode == 3 and "checked out" in third.stderr and "still running" not in third.stderr, third.stderr
    assert len(_logs(login, "submit")) == 3


def test_another_project_in_a_clone_of_the_same_name_is_refused_and_another_clone_of_the_same_project_is_not(login, tmp_path):
    first = login.workstation(tmp_path / "a" / "proj", items=2)
    other = login.workstation(tmp_path / "b" / "proj", items=3)  # another project (its own first commit), the same folder name
    assert login.orchestrator("remote", "sync", cwd=first).returncode == 0
    head = (login.cluster_root / "proj/.git/refs/orchestrator/head").read_text()
    text = one_error(login.orchestrator("remote", "sync", cwd=other), "holds another project", "rename this clone's folder", "login.root")
    assert str(login.cluster_root / "proj") in text
    assert (login.cluster_root / "proj/.git/refs/orchestrator/head").read_text() == head  # nothing was pushed
    one_error(login.orchestrator("submit", "--remote", cwd=other), "holds another project")
    one_error(login.orchestrator("fetch", cwd=other), "holds another project")  # its lock is not this project's
    for command in (["status"], ["logs", "probe@layout0"], ["cancel"]):  # neither its ledger nor its jobs
        one_error(login.orchestrator(*command, "--remote", cwd=other), "holds another project")
    clone = tmp_path / "c" / "proj"
    subprocess.run(["git", "clone", "-q", str(first), str(clone)], check=True, capture_output=True)
    again = login.orchestrator("remote", "sync", cwd=clone)
    assert again.returncode == 0, again.stdout + again.stderr
