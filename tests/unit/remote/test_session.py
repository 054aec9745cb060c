"""The remote command's side, without ssh: the scripts (one line, valid sh and bash, values only as
positional parameters), the probe and the version check, following a run through a fake connection
(chunks, a drop and the resume at the exact byte, Ctrl-C), and where the project goes (destination)."""

from __future__ import annotations

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
from orchestrator.remote.connection import ConnectionLost, RemoteError
from orchestrator.remote.destination import Destination
from orchestrator.remote.session import Detached, Facts, NotInstalled, Session, VersionMismatch
from orchestrator.util.runner import Completed

SCRIPTS = {"PROBE": session.PROBE, "PREPARE": session.PREPARE, "FOLLOW": session.FOLLOW, "RUN": session.RUN}


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
    assert f"pip install 'orchestrator=={__version__}'" in caught.value.render()
    with pytest.raises(VersionMismatch, match=f"lumi runs orchestrator 0.0.9, this side {re.escape(__version__)}"):
        session.check(Facts("u", "/h", True, True, "0.0.9"), "lumi", ())
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
