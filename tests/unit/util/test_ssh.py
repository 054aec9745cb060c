"""The ssh transport (orchestrator/util/ssh.py): the argv a remote command and an image push
produce (a fake runner at the subprocess boundary), so both ride on one master connection
and a login that prompts is asked for once; the push's ssh failures classified as the
remote commands' are."""

from __future__ import annotations

import os
import shlex

import pytest
from fakes import FakeRunner, ok

from orchestrator.containers import push
from orchestrator.containers.push_target import ShipError
from orchestrator.remote.connection import Connection
from orchestrator.util import ssh
from orchestrator.util.runner import Completed

MASTER = {"ControlMaster=auto", f"ControlPath={ssh.CONTROL_PATH}", f"ControlPersist={ssh.PERSIST}"}


def _options(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == "-o"]


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "img.sif"
    path.write_bytes(os.urandom(4096))
    return path


def _pushed(image, monkeypatch, orchestrator_ssh: str | None, **kwargs) -> FakeRunner:
    """A push to h:/x/img.sif whose probe finds nothing there; the runner that recorded it."""

    def ssh_answer(argv):
        words = shlex.split(argv[-1])
        if "sha256sum" in words[2] and "mv -f" in words[2]:  # the commit: the copy's sha256 is the image's
            return Completed(tuple(argv), 0, f"orchestrator-ship: sha256 {words[6]}\n", "")
        return Completed(tuple(argv), 0, "", "")

    runner = FakeRunner(
        {"ssh": ssh_answer, "/opt/ssh": ssh_answer, "rsync": ok("Literal data: 4,096 bytes\n"), "scp": ok()},
        installed=set(kwargs.pop("tools")),
    )
    if orchestrator_ssh is None:
        monkeypatch.delenv(ssh.SSH_ENV, raising=False)
    else:
        monkeypatch.setenv(ssh.SSH_ENV, orchestrator_ssh)
    push.push(image, "al@h:/x/img.sif", runner, **kwargs)
    return runner


def test_a_push_and_a_remote_command_start_ssh_the_same_way(image, monkeypatch):
    """Same ssh word, same options, same ControlPath: the push's ssh, its rsync and a
    remote command of the session share one master connection to the host."""
    word = "ssh -F '/my dir/config'"
    runner = _pushed(image, monkeypatch, word, interactive=True, tools={"ssh", "rsync"})
    session = Connection.to("al@h", FakeRunner(), {ssh.SSH_ENV: word}, interactive=True).argv("true")
    probe, rsync, commit = runner.calls
    assert probe[:-1] == commit[:-1] == session[:-1] == ["ssh", "-F", "/my dir/config", *ssh.options(True), "--", "al@h"]
    assert MASTER <= set(_options(probe)) and "BatchMode=yes" not in _options(probe)
    e = shlex.split(rsync[rsync.index("-e") + 1])
    assert e == session[: session.index("--")]


def test_the_caller_s_options_come_before_the_transport_s_and_batch_mode_without_a_terminal(image, monkeypatch):
    runner = _pushed(
        image, monkeypatch, None, ssh_options=["-p", "2222", "-o", "ControlMaster=no"], interactive=False, tools={"ssh", "rsync"}
    )
    probe = runner.calls[0]
    assert probe[:5] == ["ssh", "-p", "2222", "-o", "ControlMaster=no"]  # ssh takes an option's first value: the caller's
    assert _options(probe)[-1] == "BatchMode=yes"
    transport = ssh.Transport(("ssh",), False, ("-p", "2222"))
    assert transport.argv("h", "true") == ["ssh", "-p", "2222", *ssh.options(False), "--", "h", "true"]
    assert shlex.split(transport.command_line()) == transport.base()


def test_scp_gets_the_transport_s_options_and_program(image, monkeypatch):
    runner = _pushed(image, monkeypatch, "/opt/ssh -F /cfg", interactive=True, tools={"ssh", "scp"})
    (scp,) = runner.called("scp")
    assert scp[:6] == ["scp", "-q", "-S", "/opt/ssh", "-F", "/cfg"]
    assert MASTER <= set(_options(scp))
    assert runner.calls[0][0] == "/opt/ssh"


@pytest.mark.parametrize(
    ("stderr", "headline", "hint"),
    [
        ("ssh: connect to host h port 22: Connection refused", "cannot reach al@h over ssh", "VPN or ProxyJump"),
        ("ssh: Could not resolve hostname h: Name or service not known", "cannot reach al@h over ssh", "container.push_host"),
        ("al@h: Permission denied (publickey).", "al@h refused the ssh login", "IdentityFile"),
        ("Host key verification failed.", "the host key of al@h could not be verified", "accept the key"),
    ],
)
def test_a_failed_push_is_classified_as_the_remote_commands_are(image, stderr, headline, hint, monkeypatch):
    monkeypatch.delenv(ssh.SSH_ENV, raising=False)
    runner = FakeRunner({"ssh": ok(stderr=stderr, rc=255)}, installed={"ssh", "rsync"})
    with pytest.raises(ShipError) as err:
        push.push(image, "al@h:/x/img.sif", runner, interactive=False)
    assert str(err.value).startswith(f"push of {image} to al@h:/x/img.sif failed: {headline}")
    assert hint in str(err.value) and "nothing was installed at /x/img.sif" in str(err.value)
    assert type(ssh.classify("al@h", stderr)[0]).__name__ in {"Unreachable", "LoginRefused", "HostKeyMismatch"}


def test_a_bad_orchestrator_ssh_is_one_error():
    with pytest.raises(ssh.RemoteError, match="cannot be split"):
        ssh.Transport.here({"ORCHESTRATOR_SSH": "ssh -F 'unclosed"}, interactive=False)
