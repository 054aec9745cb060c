"""The ssh connection: the argv every call gets, the classification of ssh's failures (from the
texts OpenSSH 9 prints), and the retries of a dropped connection (a fake runner at the subprocess
boundary, a recorded sleep)."""

from __future__ import annotations

import pytest
from fakes import FakeRunner, ok

from orchestrator.remote import connection
from orchestrator.remote.connection import Connection
from orchestrator.util.runner import Completed
from orchestrator.util.ssh import ConnectionLost, HostKeyMismatch, LoginRefused, RemoteError, Unreachable, classify, ssh_words

CHANGED = """\
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!
Someone could be eavesdropping on you right now (man-in-the-middle attack)!
It is also possible that a host key has just been changed.
The fingerprint for the ED25519 key sent by the remote host is
SHA256:2S1v7bHhGcP1Xx7pDq3PO3Ww1bHhGcP1Xx7pDq3PO3W.
Please contact your system administrator.
Add correct host key in /home/u/.ssh/known_hosts to get rid of this message.
Offending ED25519 key in /home/u/.ssh/known_hosts:3
  remove with:
  ssh-keygen -f "/home/u/.ssh/known_hosts" -R "lumi.csc.fi"
Host key for lumi.csc.fi has changed and you have requested strict checking.
Host key verification failed.
"""


def test_every_call_multiplexes_over_one_master_and_fails_fast():
    conn = Connection("lumi", FakeRunner(), ("ssh",), interactive=True)
    argv = conn.argv("true")
    assert argv[0] == "ssh" and argv[-3:] == ["--", "lumi", "true"]
    pairs = {argv[i + 1] for i, w in enumerate(argv) if w == "-o"}
    assert {"ControlMaster=auto", "ControlPath=~/.ssh/orchestrator-%C", "ControlPersist=10m", "ConnectTimeout=20"} <= pairs
    assert "BatchMode=yes" not in pairs  # a terminal: a password or one-time code can be asked, once, by the master
    assert "BatchMode=yes" in Connection("lumi", FakeRunner(), ("ssh",), interactive=False).argv("true")


def test_orchestrator_ssh_replaces_the_ssh_word():
    assert ssh_words({}) == ("ssh",)
    assert ssh_words({"ORCHESTRATOR_SSH": "ssh -F '/my dir/config'"}) == ("ssh", "-F", "/my dir/config")
    with pytest.raises(RemoteError, match="cannot be split"):
        ssh_words({"ORCHESTRATOR_SSH": "ssh -F 'unclosed"})


@pytest.mark.parametrize(
    ("stderr", "kind", "words", "again"),
    [
        (CHANGED, HostKeyMismatch, "is NOT the one your known_hosts", False),
        ("Host key verification failed.\n", HostKeyMismatch, "could not be verified", False),
        ("No ED25519 host key is known for [h]:22 and you have requested strict checking.\nHost key verification failed.\n",
         HostKeyMismatch, "could not be verified", False),
        ("u@lumi.csc.fi: Permission denied (publickey,keyboard-interactive).\n", LoginRefused, "refused the login", False),
        ("Received disconnect from 1.2.3.4 port 22:2: Too many authentication failures\n", LoginRefused, "refused the login", False),
        ("ssh: Could not resolve hostname lumi.csc.fii: Name or service not known\n", Unreachable, "the name does not resolve", False),
        ("ssh: connect to host 127.0.0.1 port 1: Connection refused\n", Unreachable, "the connection was refused", False),
        ("ssh: connect to host 10.0.0.1 port 22: Connection timed out\n", Unreachable, "no answer (timed out)", False),
        ("Connection to lumi.csc.fi closed by remote host.\n", ConnectionLost, "dropped", True),
        ("client_loop: send disconnect: Broken pipe\n", ConnectionLost, "dropped", True),
        ("mux_client_request_session: read from master failed: Broken pipe\n", ConnectionLost, "dropped", True),
        ("", ConnectionLost, "dropped", True),
        ("something else entirely\n", RemoteError, "failed (exit 255)", False),
    ],
)  # fmt: skip
def test_ssh_failures_are_classified(stderr, kind, words, again):
    error, retry = classify("lumi", stderr)
    assert type(error) is kind and words in error.render() and retry is again
    assert "@@@" not in error.render()


def test_a_changed_host_key_quotes_ssh_s_own_removal_command():
    error, _ = classify("lumi", CHANGED)
    assert 'ssh-keygen -f "/home/u/.ssh/known_hosts" -R "lumi.csc.fi"' in error.render()
    assert error.exit_code == 2


def test_no_answer_is_retried_once_the_session_had_one():
    assert classify("h", "ssh: connect to host h port 22: Connection refused\n", connected=True)[1] is True


def _answers(*results: Completed):
    queue = list(results)
    return lambda argv: queue.pop(0) if len(queue) > 1 else queue[0]


def test_a_dropped_connection_is_retried_with_a_doubling_backoff():
    dropped = Completed((), 255, "", "Connection closed by 1.2.3.4 port 22\n")
    runner = FakeRunner({"ssh": _answers(dropped, dropped, Completed((), 0, "fine\n", ""))}, installed={"ssh"})
    sleeps: list[float] = []
    conn = Connection("h", runner, ("ssh",), sleep=sleeps.append)
    assert conn.run("true").stdout == "fine\n"
    assert len(runner.called("ssh")) == 3 and sleeps == [2.0, 4.0]


def test_retries_run_out_into_one_message_with_exit_1():
    runner = FakeRunner({"ssh": ok(stderr="Connection reset by 1.2.3.4 port 22\n", rc=255)}, installed={"ssh"})
    sleeps: list[float] = []
    with pytest.raises(ConnectionLost) as caught:
        Connection("h", runner, ("ssh",), sleep=sleeps.append).run("true")
    assert len(runner.called("ssh")) == connection.RETRIES + 1 and sleeps == [2.0, 4.0, 8.0]
    assert caught.value.exit_code == 1 and "tried 4 times" in caught.value.render()


def test_a_refused_login_is_not_retried_and_a_remote_exit_status_is_not_an_ssh_failure():
    runner = FakeRunner({"ssh": ok(stderr="h: Permission denied (publickey).\n", rc=255)}, installed={"ssh"})
    with pytest.raises(LoginRefused):
        Connection("h", runner, ("ssh",), sleep=lambda s: None).run("true")
    assert len(runner.called("ssh")) == 1
    runner = FakeRunner({"ssh": ok(stdout="x", rc=3)}, installed={"ssh"})
    assert Connection("h", runner, ("ssh",)).run("false").returncode == 3


def test_connect_without_ssh_says_so():
    with pytest.raises(RemoteError, match="`ssh` is not installed here"):
        Connection("h", FakeRunner(installed=set()), ("ssh",)).connect()
