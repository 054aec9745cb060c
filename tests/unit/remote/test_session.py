"""The remote command's side, without ssh: the scripts (one line, valid sh and bash, values only as
positional parameters), the probe and the version check, following a run through a fake connection
(chunks, a drop and the resume at the exact byte, Ctrl-C), and where the project goes (destination)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from fakes import FakeRunner, ok
from support import HOSTILE_DIR

from orchestrator import __version__
from orchestrator.remote import destination, session
from orchestrator.remote.destination import Destination
from orchestrator.remote.session import Detached, Facts, NotInstalled, Session, VersionMismatch
from orchestrator.util.runner import Completed
from orchestrator.util.ssh import ConnectionLost, RemoteError

SCRIPTS = {
    "VENV_PROBE": session.VENV_PROBE,
    "PROBE": session.PROBE,
    "PREPARE": session.PREPARE,
    "FOLLOW": session.FOLLOW,
    "RUN": session.RUN,
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_script_is_one_line_that_sh_and_bash_parse(name):
    script = SCRIPTS[name]
    assert "\n" not in script  # csh and tcsh login shells split a quoted newline
    assert not re.search(r"![^ ]", script)  # csh's history expansion, even in single quotes
    for shell in ("bash", "sh"):
        assert subprocess.run([shell, "-n", "-c", script], capture_output=True).returncode == 0, shell


def test_values_reach_the_script_as_positional_parameters_only(tmp_path):
    line = session.command(session.PREPARE, f"/p/{HOSTILE_DIR}", "x", setup=["module load a", "echo 'b'"])
    words = shlex.split(line)
    assert words[:2] == ["bash", "-lc"] and words[2] == session.PREPARE
    assert words[3:] == ["bash", "2", "module load a", "echo 'b'", f"/p/{HOSTILE_DIR}", "x"]
    # Run for real (as the remote login shell would parse the line): the hostile folder is made, nothing executed.
    folder = tmp_path / HOSTILE_DIR
    done = subprocess.run(["sh", "-c", session.command(session.PREPARE, str(folder), str(folder), setup=[])], cwd=tmp_path,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (folder / ".git").is_dir() and "created" in done.stdout and not (tmp_path / "ship-canary").exists()


def test_run_and_follow_for_real_pass_the_exit_status_through(tmp_path):
    """RUN started detached in a folder here (bash standing in for ssh), then FOLLOW from a byte offset."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "orchestrator").write_text('#!/bin/sh\necho "ran $*"\necho "second line"\nexit 4\n')
    (fake / "orchestrator").chmod(0o755)
    setup = [f"export PATH={fake}:$PATH"]
    done = subprocess.run(["sh", "-c", session.command(session.RUN, str(tmp_path), "r1", "other", "status", "a b", setup=setup)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.stdout == "ran status a b\nsecond line\n"
    said = {w[0]: w[1:] for w in session.markers(done.stderr)}
    assert said["started"] == ["r1"] and said["exit"] == ["4"]
    again = subprocess.run(["sh", "-c", session.command(session.FOLLOW, str(tmp_path), "r1", "15")], capture_output=True, text=True)
    assert again.stdout == "second line\n" and "exit 4" in again.stderr
    newest = subprocess.run(["sh", "-c", session.command(session.FOLLOW, str(tmp_path), "", "0")], capture_output=True, text=True)
    assert newest.stdout.startswith("ran status")
    assert (tmp_path / ".orchestrator/remote/r1/argv").read_text() == "status a b\n"


def test_the_probe_is_parsed_and_checked():
    out = "banner\norchestrator-remote: user u\norchestrator-remote: home /users/u\norchestrator-remote: git yes\n"
    out += f"orchestrator-remote: tools yes\norchestrator-remote: version orchestrator, version {__version__}\n"
    facts = session.parse_probe(out)
    assert facts == Facts("u", "/users/u", True, True, __version__)
    session.check(facts, "lumi", ())
    with pytest.raises(NotInstalled) as caught:
        session.check(Facts("u", "/h", True, True, None), "lumi", ["module load x"])
    assert "not installed on lumi" in caught.value.render() and "after login.setup" in caught.value.render()
    assert "from here: orchestrator remote install" in caught.value.render()
    with pytest.raises(VersionMismatch, match=f"lumi runs orchestrator 0.0.9, this side {re.escape(__version__)}") as caught:
        session.check(Facts("u", "/h", True, True, "0.0.9"), "lumi", (), install="orchestrator remote install --cluster=lumi")
    assert "orchestrator remote install --cluster=lumi" in caught.value.render()
    assert "pip install 'dvc-slurm-orchestrator==0.0.9'" in caught.value.render()
    with pytest.raises(RemoteError, match="git is not installed on lumi"):
        session.check(Facts("u", "/h", False, True, __version__), "lumi", ())


class FakeConnection:
    """Answers stream() from a list of (stdout chunks, stderr, exit status); records the lines."""

    def __init__(self, answers):
        self.answers, self.lines, self.slept = list(answers), [], []

    def stream(self, line, on_stdout):
        self.lines.append(line)
        chunks, stderr, rc = self.answers.pop(0)
        for c in chunks:
            if c is KeyboardInterrupt:
                raise KeyboardInterrupt
            on_stdout(c)
        return Completed(("ssh",), rc, "", stderr)

    def backoff(self, attempt):
        self.slept.append(attempt)


def _session(conn) -> Session:
    dest = Destination("lumi", "lumi", "/scratch/p", Path("/ws/proj"), "", ())
    return Session(conn, dest, Facts("u", "/users/u", True, True, __version__))


def test_a_drop_resumes_at_the_byte_it_had_and_the_exit_status_comes_back():
    T = session.TAG
    conn = FakeConnection([
        ([b"line 1\nli"], f"{T} started r9\nConnection to lumi closed by remote host.\n", 255),
        ([b"ne 2\n"], f"{T} exit 3\n", 0),
    ])  # fmt: skip
    out, said = [], []
    assert _session(conn).run(["status"], out.append, said.append) == 3
    assert b"".join(out) == b"line 1\nline 2\n"
    assert shlex.split(conn.lines[1])[-3:] == ["/scratch/p/proj", "r9", "9"]  # FOLLOW run r9 from byte 9
    assert conn.slept == [0] and "reconnecting (try 1 of 3)" in said[0]


def test_drops_that_do_not_end_give_one_message_saying_it_goes_on():
    T = session.TAG
    conn = FakeConnection([([], f"{T} started r9\n", 255)] * 4)
    with pytest.raises(ConnectionLost) as caught:
        _session(conn).run(["submit"], lambda b: None, lambda s: None)
    text = caught.value.render()
    assert "`orchestrator submit` goes on on lumi" in text and "orchestrator remote attach r9" in text
    assert caught.value.exit_code == 1 and len(conn.lines) == 4


def test_ctrl_c_stops_the_following_only():
    T = session.TAG
    conn = FakeConnection([([b"x\n", KeyboardInterrupt], f"{T} started r9\n", 0)])
    with pytest.raises(Detached) as caught:
        _session(conn).run(["submit"], lambda b: None, lambda s: None)
    assert caught.value.exit_code == 130 and "nothing was stopped on the cluster" in caught.value.render()


def test_ctrl_c_before_the_far_side_named_the_run_says_where_its_log_is_not_a_placeholder():
    conn = FakeConnection([([KeyboardInterrupt], "", 0)])
    with pytest.raises(Detached) as caught:
        _session(conn).run(["submit"], lambda b: None, lambda s: None)
    text = caught.value.render()
    assert "<run>" not in text and "log: lumi:/scratch/p/proj/.orchestrator/remote/*-submit-*/log, the newest" in text, text
    assert "orchestrator remote attach" in text


def test_a_drop_before_the_run_started_starts_it_again_and_an_attach_is_said():
    T = session.TAG
    conn = FakeConnection([([], "client_loop: send disconnect: Broken pipe\n", 255), ([], f"{T} attached r1 submit\n{T} exit 0\n", 0)])
    said = []
    assert _session(conn).run(["submit"], lambda b: None, said.append) == 0
    assert conn.lines[0] == conn.lines[1]  # RUN again: a submit that did start is attached to, not started twice
    assert any("still running on lumi (submit): following it" in s for s in said)


def test_destination_folders_and_overrides(tmp_path):
    dest = Destination("h", "lumi", "/scratch/project_1/${USER}/p", Path("/ws/my proj"), "sub/dir", ())
    assert dest.folder("u", "/users/u") == "/scratch/project_1/u/p/my proj"
    assert dest.project("u", "/users/u") == "/scratch/project_1/u/p/my proj/sub/dir"
    assert Destination("h", "x", "work", Path("/ws/p"), "", ()).folder("u", "/home/u") == "/home/u/work/p"
    assert Destination("h", "x", "${HOME}/w", Path("/ws/p"), "", ()).folder("u", "/home/u") == "/home/u/w/p"

    (tmp_path / "params.yaml").write_text("orchestrator:\n  cluster: lumi\n  account: project_465000858\n")
    runner = FakeRunner({"git": ok(f"{tmp_path}\n\n")}, installed={"git"})
    found = destination.resolve(tmp_path, None, runner)
    assert found.host == "lumi.csc.fi" and found.root == "/scratch/project_465000858/${USER}/orchestrator-projects"
    (tmp_path / "params.yaml").write_text("orchestrator:\n  cluster: lumi\n  account: project_465000858\n  login_host: my-lumi\n")
    assert destination.resolve(tmp_path, None, runner).host == "my-lumi"  # the user's own ssh alias wins
    (tmp_path / "params.yaml").write_text("orchestrator:\n  cluster: testbed\n")
    with pytest.raises(RemoteError, match="names no login node") as caught:
        destination.resolve(tmp_path, None, runner)
    assert "orchestrator.login_host" in caught.value.render()
    (tmp_path / "params.yaml").write_text("orchestrator:\n  cluster: lumi\n")
    with pytest.raises(RemoteError, match="needs the account"):
        destination.resolve(tmp_path, None, runner)


def test_a_slurm_error_here_hints_at_remote_where_the_profile_has_a_login_node(tmp_path, monkeypatch):
    from orchestrator.cli import remote

    (tmp_path / "params.yaml").write_text("orchestrator:\n  cluster: lumi\n")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert "to run it on lumi.csc.fi, the login node of lumi, from here: add --remote" in remote.hint(tmp_path, None)
    assert remote.hint(tmp_path, "testbed") is None  # no login node named
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)
    assert remote.hint(tmp_path, None) is None  # on a login node: no hint


class ShellConnection:
    """run() with sh here standing in for ssh to the login node."""

    def run(self, line, **kw):
        done = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=60)
        return Completed(("ssh",), done.returncode, done.stdout, done.stderr)


def _prepared(tmp_path, identity, clone="proj") -> Session:
    dest = Destination("lumi", "lumi", str(tmp_path / "root"), Path("/ws") / clone, "", (), identity)
    return Session(ShellConnection(), dest, Facts("u", str(tmp_path), True, True, __version__))


A, B, C = "a" * 40, "b" * 40, "c" * 40


def test_a_folder_holding_another_project_is_refused_and_another_clone_of_the_same_one_is_not(tmp_path):
    assert _prepared(tmp_path, (A,)).prepare() == (True, None)
    record = tmp_path / "root/proj" / session.PROJECT_FILE
    assert record.read_text().split() == [A]  # recorded on the first sync
    with pytest.raises(session.ForeignProject) as caught:
        _prepared(tmp_path, (B,)).prepare()
    text = caught.value.render()
    assert f"lumi:{tmp_path}/root/proj holds another project (first commit {A[:12]}; this repository's is {B[:12]})" in text
    assert "rename this clone's folder" in text and "set login.root in the profile 'lumi'" in text and caught.value.exit_code == 2
    assert record.read_text().split() == [A]  # nothing changed there
    assert _prepared(tmp_path, (C, A)).prepare() == (False, None)  # another clone, histories merged since: one root shared
    assert _prepared(tmp_path, ()).prepare() == (False, None)  # no commit here yet: nothing to compare (the sync refuses it)


def test_a_folder_synced_before_identities_were_recorded_is_known_by_what_was_pushed_there(tmp_path):
    folder = tmp_path / "root/proj"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@e", "-C", str(folder)]
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "root"], check=True)
    subprocess.run([*git, "update-ref", "refs/orchestrator/head", "HEAD"], check=True)
    root = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    with pytest.raises(session.ForeignProject):
        _prepared(tmp_path, (B,)).prepare()
    assert (folder / session.PROJECT_FILE).read_text().split() == [root]
    assert _prepared(tmp_path, (root,)).prepare() == (False, None)


def test_identity_is_the_root_commits_and_none_without_a_commit(tmp_path):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@e", "-C", str(tmp_path)]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    from orchestrator.util.runner import SubprocessRunner

    assert destination.identity(tmp_path, SubprocessRunner()) == ()
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "root"], check=True)
    first = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "second"], check=True)
    assert destination.identity(tmp_path, SubprocessRunner()) == (first,)


def test_old_finished_runs_are_pruned_and_running_ones_never(tmp_path):
    runs = tmp_path / ".orchestrator/remote"
    keep = session.KEEP_RUNS
    names = [f"20260101T0000{i:02d}-status-00000" for i in range(keep + 5)]
    for name in names:
        (runs / name).mkdir(parents=True)
        (runs / name / "status").write_text("0\n")
        (runs / name / "pid").write_text("999999999\n")  # no such process
    (runs / names[0] / "status").unlink()  # the oldest still running: no status yet
    (runs / names[1] / "pid").write_text(f"{os.getpid()}\n")  # its process alive
    (runs / "submit.run").write_text(names[0])
    done = subprocess.run(["sh", "-c", f"r={shlex.quote(str(runs))}; {session.PRUNE} exit 0"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    left = sorted(p.name for p in runs.iterdir())
    # the two running ones, and the newest finished up to KEEP_RUNS (the one with a live pid among them)
    assert left == sorted([*names[:2], *names[-(keep - 1) :], "submit.run"])
    again = subprocess.run(["sh", "-c", f"r={shlex.quote(str(runs))}; {session.PRUNE} exit 0"], capture_output=True, text=True)
    assert again.returncode == 0 and sorted(p.name for p in runs.iterdir()) == left


def test_a_new_run_prunes_before_it_starts(tmp_path):
    runs = tmp_path / ".orchestrator/remote"
    for i in range(session.KEEP_RUNS + 2):
        (runs / f"20250101T0000{i:02d}-status-00000").mkdir(parents=True)
        (runs / f"20250101T0000{i:02d}-status-00000" / "status").write_text("0\n")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "orchestrator").write_text("#!/bin/sh\necho ran\n")
    (fake / "orchestrator").chmod(0o755)
    new = "20260101T000000-status-00000"
    line = session.command(session.RUN, str(tmp_path), new, "other", "status", setup=[f"export PATH={fake}:$PATH"])
    done = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=60)
    assert done.stdout == "ran\n", done.stderr
    left = sorted(p.name for p in runs.iterdir())
    assert len(left) == session.KEEP_RUNS + 1 and left[-1] == new and "20250101T000001-status-00000" not in left
