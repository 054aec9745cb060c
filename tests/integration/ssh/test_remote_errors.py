"""`--remote` against a login node that is wrong: unreachable (refused, a name that does not
resolve), a host key that does not match, a refused login, no orchestrator there, another version
there, a project outside git. Each: exit 2, one message naming the problem, nothing made on the
cluster (so nothing submitted). The `login` fixture: tests/integration/ssh/conftest.py."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from support import one_error

from orchestrator import __version__

pytestmark = pytest.mark.ssh


def _key(path) -> tuple[str, str]:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    kind, key = path.with_suffix(".pub").read_text().split()[:2]
    return kind, key


@pytest.mark.parametrize(
    ("alias", "hostname", "port", "why"),
    [
        ("closed-port", "127.0.0.1", 1, "the connection was refused"),
        ("no-such-name", "no-such-host.invalid", None, "the name does not resolve"),
    ],
)
def test_an_unreachable_host_is_one_message_and_nothing_is_sent(login, tmp_path, alias, hostname, port, why):
    project = login.workstation(tmp_path / "ws" / "proj")
    login.add_host(alias, hostname, port=port)
    login.set_login_host(project, alias)
    one_error(login.orchestrator("submit", "--remote", cwd=project, timeout=120), f"cannot reach {alias}: {why}")
    assert not login.cluster_root.exists()


def test_a_host_key_that_does_not_match_stops_before_anything_is_sent(login, tmp_path):
    project = login.workstation(tmp_path / "ws" / "proj")
    kind, key = _key(tmp_path / "other_key")
    known = tmp_path / "known_hosts_other"
    # HostName localhost: a ControlPath of its own (%C hashes the host name), so no master of another test is reused.
    known.write_text(f"[localhost]:{login.sshd.port} {kind} {key}\n")
    login.add_host("changed-key", "localhost", known)
    login.stop_master("changed-key")
    login.set_login_host(project, "changed-key")
    text = one_error(login.orchestrator("submit", "--remote", cwd=project), "the host key of changed-key is NOT the one your known_hosts")
    assert f'ssh-keygen -f "{known}" -R "[localhost]:{login.sshd.port}"' in text and "nothing was sent" in text
    assert not login.cluster_root.exists()


def test_a_refused_login_is_named(login, tmp_path):
    project = login.workstation(tmp_path / "ws" / "proj")
    _key(tmp_path / "stranger_key")
    known = tmp_path / "known_hosts_localhost"
    host_key = (login.sshd.root / "host_ed25519_key.pub").read_text().split()
    known.write_text(f"[localhost]:{login.sshd.port} {host_key[0]} {host_key[1]}\n")
    login.add_host("wrong-key", "localhost", known, key=tmp_path / "stranger_key")
    login.stop_master("wrong-key")
    login.set_login_host(project, "wrong-key")
    one_error(login.orchestrator("status", "--remote", cwd=project), "wrong-key refused the login", "IdentityFile")


def test_a_login_node_without_the_orchestrator_isone_error(login, tmp_path):
    project = login.workstation(tmp_path / "ws" / "proj")
    assert shutil.which("orchestrator", path="/usr/bin:/bin") is None
    login.set_setup(["export PATH=/usr/bin:/bin"])  # git, flock and setsid stay; pyenv's orchestrator goes
    text = one_error(
        login.orchestrator("submit", "--remote", cwd=project),
        "the orchestrator is not installed on login-node",
        "from here: orchestrator remote install",
        "login.setup",
    )
    assert "nothing was sent" in text
    assert not login.cluster_root.exists()


def test_another_version_there_is_refused_naming_both(login, tmp_path):
    project = login.workstation(tmp_path / "ws" / "proj")
    fake = tmp_path / "old-bin"
    fake.mkdir()
    (fake / "orchestrator").write_text("#!/bin/sh\necho 'orchestrator, version 0.0.9'\n")
    (fake / "orchestrator").chmod(0o755)
    login.set_setup([f"export PATH={fake}:$PATH"])
    text = one_error(login.orchestrator("submit", "--remote", cwd=project), f"login-node runs orchestrator 0.0.9, this side {__version__}")
    assert "orchestrator remote install" in text and "nothing was sent" in text
    assert not login.cluster_root.exists()  # nothing sent: not even the cluster's folder made
    assert not login.cluster_root.exists()


def test_a_project_outside_git_is_refused_before_connecting(login, tmp_path):
    project = login.workstation(tmp_path / "ws" / "proj")
    shutil.rmtree(project / ".git")
    one_error(login.orchestrator("submit", "--remote", cwd=project), "is not in a git repository")
    assert not login.cluster_root.exists()


def test_a_command_before_the_project_was_ever_sent_says_how_to_send_it(login, tmp_path):
    project = login.workstation(tmp_path / "ws" / "proj")
    text = one_error(login.orchestrator("status", "--remote", cwd=project), "is not on login-node", "orchestrator remote sync")
    assert str(login.cluster_root / "proj") in text
