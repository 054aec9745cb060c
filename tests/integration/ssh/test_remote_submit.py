"""`submit --remote`, `status --remote`, `logs --remote` from a workstation clone, against the loopback
sshd standing in for the login node and the real Slurm testbed: the project sent as git commits,
jobs submitted there, followed from here; a submit cut off mid-way (its ssh master killed, the
client killed) and run again submits each item once. The `login` fixture: conftest.py beside this."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from support import ACCOUNT, jobs_of

pytestmark = [pytest.mark.ssh, pytest.mark.slurm]

GIT_ID = ["git", "-c", "user.name=Test", "-c", "user.email=test@example.com"]


def _head(repo: Path) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def _wait_completed(login, project: Path, rows: int, timeout: float = 240) -> str:
    deadline = time.monotonic() + timeout
    while True:
        done = login.orchestrator("status", "--remote", cwd=project)
        assert done.returncode == 0, done.stdout + done.stderr
        if done.stdout.count("completed") >= rows or time.monotonic() > deadline:
            return done.stdout
        time.sleep(2)


def test_submit_status_and_logs_from_a_workstation_clone(slurm_testbed, login, tmp_path):
    project = login.workstation(tmp_path / "ws" / "proj", items=2)
    since = time.time()
    done = login.orchestrator("submit", "--remote", cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "probe@layout0" in done.stdout and "probe@layout1" in done.stdout and "orchestrator:record" in done.stdout
    assert "made " in done.stderr and "running `orchestrator submit` on login-node" in done.stderr
    remote = login.cluster_root / "proj"
    assert _head(remote) == _head(project)  # the workstation's commit, checked out there

    table = _wait_completed(login, project, rows=3)
    assert table.count("completed") == 3, table
    logs = login.orchestrator("logs", "--remote", "probe@layout1", cwd=project)
    assert logs.returncode == 0 and "probe out/1 rank 1 on node" in logs.stdout, logs.stdout + logs.stderr
    names = Counter(j[1] for j in jobs_of(ACCOUNT, since, remote, expect=3))
    assert names == {"probe@layout0": 1, "probe@layout1": 1, "orchestrator-record": 1}, names
    assert (remote / "out" / "1" / "rank1.txt").exists() and not (project / "out").exists()  # outputs stay on the cluster
    lock = yaml.safe_load((remote / "dvc.lock").read_text())
    assert set(lock["stages"]) == {"probe@layout0", "probe@layout1"}

    # A new commit that changes no dependency: sent, checked out, and nothing is stale there.
    (project / "README.md").write_text("notes\n")
    subprocess.run(["git", "add", "README.md"], cwd=project, check=True)
    subprocess.run([*GIT_ID, "commit", "-q", "-m", "notes"], cwd=project, check=True)
    again = login.orchestrator("submit", "--remote", cwd=project)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "nothing to submit" in again.stdout and _head(remote) == _head(project)
    assert yaml.safe_load((remote / "dvc.lock").read_text()) == lock  # the cluster's records kept
    assert len(jobs_of(ACCOUNT, since, remote)) == 3

    # A logs call for an item that does not exist: the remote's message and exit status, passed through.
    missing = login.orchestrator("logs", "--remote", "nosuch", cwd=project)
    assert missing.returncode == 2 and "no submitted item matches nosuch" in missing.stdout + missing.stderr


def test_a_submit_cut_off_mid_way_and_run_again_submits_each_item_once(slurm_testbed, login, tmp_path):
    project = login.workstation(tmp_path / "ws" / "proj", items=4)
    remote = login.cluster_root / "proj"
    since = time.time()
    first = login.popen("submit", "--remote", cwd=project)
    deadline = time.monotonic() + 120
    # Cut off right after its first sbatch (the others, and the ledger's last writes, still to come).
    while not any("probe@layout0: job" in p.read_text() for p in remote.glob(".orchestrator/remote/*-submit-*/log")):
        assert first.poll() is None and time.monotonic() < deadline, "the remote submit never got to sbatch, or ended first"
        time.sleep(0.02)
    login.stop_master()  # the network goes...
    first.kill()  # ...and so does the workstation's process
    first.communicate()

    second = login.orchestrator("submit", "--remote", cwd=project)
    assert second.returncode == 0, second.stdout + second.stderr
    table = _wait_completed(login, project, rows=5)
    assert table.count("completed") == 5, table
    names = Counter(j[1] for j in jobs_of(ACCOUNT, since, remote, expect=5))
    assert names == {**{f"probe@layout{i}": 1 for i in range(4)}, "orchestrator-record": 1}, names
    runs = sorted(p.name for p in (remote / ".orchestrator" / "remote").glob("*-submit-*"))
    # Whether the second call found the first still running (and followed it) or not, it ran after it and found all submitted.
    assert len(runs) == 2, (runs, second.stderr)
