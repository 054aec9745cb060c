"""A login node for the `--remote` tests: the loopback sshd (the ``sshd`` fixture) reached through an
ssh config file of the test's own, by a Host alias only it defines (so a test that gets through
proves the user's config is what ssh used), and a workstation clone of a small project.

The "cluster" folder is on this same machine; ORCHESTRATOR_SSH='ssh -F CONFIG' points ssh at
the config (ssh reads ~/.ssh/config from the password database's home, whatever $HOME says)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from support import ACCOUNT, ROOT, with_git

ALIAS = "login-node"


@dataclass
class Login:
    config: Path
    known_hosts: Path
    cluster_root: Path  # login.root: projects land in <root>/<clone folder name>
    profile: Path  # the testbed profile with a login section (its host a name that must NOT be used)
    env: dict
    sshd: object

    def ssh(self, *args: str, alias: str = ALIAS) -> subprocess.CompletedProcess:
        return subprocess.run(["ssh", "-F", str(self.config), *args, alias], capture_output=True, text=True, timeout=30)

    def stop_master(self, alias: str = ALIAS) -> None:
        """End the session's master connection (what a dropped network does to it)."""
        self.ssh("-o", "ControlPath=~/.ssh/orchestrator-%C", "-O", "exit", alias=alias)

    def orchestrator(self, *args: str, cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "orchestrator", *args], cwd=cwd, env={**self.env, **(env or {})},
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip

    def add_host(
        self, alias: str, hostname: str, known_hosts: Path | None = None, port: int | None = None, key: Path | None = None
    ) -> None:
        """Another Host entry in this test's ssh config."""
        with self.config.open("a") as f:
            f.write(host_config(self.sshd, alias, hostname, known_hosts or self.known_hosts, port, key))

    def workstation(self, where: Path, items: int = 2, params: dict | None = None) -> Path:
        return workstation(where, self, items, params)

    def set_login_host(self, project: Path, alias: str) -> None:
        data = yaml.safe_load((project / "params.yaml").read_text())
        data["orchestrator"]["login_host"] = alias
        (project / "params.yaml").write_text(yaml.safe_dump(data, sort_keys=False))

    def set_setup(self, lines: list[str]) -> None:
        """The profile's login.setup lines."""
        data = yaml.safe_load(self.profile.read_text())
        data["login"]["setup"] = lines
        self.profile.write_text(yaml.safe_dump(data, sort_keys=False))

    def popen(self, *args: str, cwd: Path) -> subprocess.Popen:
        """`orchestrator ARGS` started as a terminal's foreground job: Ctrl-C (SIGINT) at its
        default. A suite started in the background of a non-interactive shell has SIGINT and
        SIGQUIT ignored (POSIX), which the client would inherit and, rightly, keep; a Python
        handler here is reset to the default in the child."""
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            argv = [sys.executable, "-m", "orchestrator", *args]
            return subprocess.Popen(argv, cwd=cwd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        finally:
            signal.signal(signal.SIGINT, previous)


def host_config(sshd, alias: str, hostname: str, known_hosts: Path, port: int | None = None, key: Path | None = None) -> str:
    return (
        f"Host {alias}\n  HostName {hostname}\n  Port {port or sshd.port}\n  User {sshd.user}\n  IdentityFile {key or sshd.key}\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {known_hosts}\n  StrictHostKeyChecking yes\n  LogLevel ERROR\n"
    )


@pytest.fixture
def login(sshd, tmp_path) -> Login:
    """The loopback sshd as a cluster's login node, under the alias ``login-node`` of a config file of this test."""
    known = tmp_path / "known_hosts"
    host_key = (sshd.root / "host_ed25519_key.pub").read_text().split()
    known.write_text(f"[127.0.0.1]:{sshd.port} {host_key[0]} {host_key[1]}\n")
    config = tmp_path / "ssh_config"
    config.write_text(host_config(sshd, ALIAS, "127.0.0.1", known))
    profile = yaml.safe_load((ROOT / "orchestrator/config/profiles/testbed.yaml").read_text())
    profile["name"] = "remote-testbed"
    # A host that cannot be reached: params.yaml's login_host (the alias) must win over it.
    profile["login"] = {"host": "login.example.invalid", "root": str(tmp_path / "cluster")}
    path = tmp_path / "remote-testbed.yaml"
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    env = {**os.environ, "ORCHESTRATOR_SSH": f"ssh -F {config}", "ORCH_POLL_MAX_S": "2"}
    made = Login(config, known, tmp_path / "cluster", path, env, sshd)
    yield made
    made.stop_master()


PROBE = """\
import os, sys, time
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
time.sleep(float(os.environ.get("PROBE_SLEEP", "0")))
print(f"probe {out} rank {os.environ['SLURM_PROCID']} on {os.environ['SLURMD_NODENAME']}", flush=True)
open(os.path.join(out, f"rank{os.environ['SLURM_PROCID']}.txt"), "w").write("done")
"""


def workstation(where: Path, login: Login, items: int = 2, params: dict | None = None) -> Path:
    """A git clone with a DVC project of ``items`` (up to 4) items of probe.py, committed: the workstation's."""
    settings = {"cluster": str(login.profile), "account": ACCOUNT, "login_host": ALIAS, **(params or {})}
    # Every item a shape of its own (nodes x tasks), so each is a job of its own, not a task of an array.
    data = {"orchestrator": settings, "layouts": [{"nodes": 1 + i // 2 % 2, "tasks": 1 + i % 2, "i": i} for i in range(items)]}
    stages = {
        "probe": {
            "matrix": {"layout": "${layouts}"},
            "cmd": "orchestrator run --nodes ${item.layout.nodes} --gpus-per-node ${item.layout.tasks} -- "
            "python probe.py out/${item.layout.i}",
            "deps": ["probe.py"],
            "outs": [{"out/${item.layout.i}": {"persist": True}}],
        }
    }
    where.mkdir(parents=True)
    (where / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False))
    (where / "params.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    (where / "probe.py").write_text(PROBE)
    (where / ".gitignore").write_text(".orchestrator/\n")
    return with_git(where, "the project")
