"""`orchestrator remote install` over the loopback sshd: from a workstation clone, the one command puts
this side's version in a venv under the cluster folder of a login node whose PATH has no orchestrator,
and `--remote` then runs that venv's (`submit --remote` on the testbed). Before it, --remote names the command (exit 2, nothing sent).

Feasible on a small machine: the wheel is built once here, and the venv there is made with
--system-site-packages from this interpreter, whose site-packages already hold DVC and the other
dependencies, so pip installs offline (--wheels: --no-index) only the orchestrator's own wheel."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from support import ACCOUNT, jobs_of, one_error

from orchestrator import __version__

pytestmark = [pytest.mark.ssh, pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture
def wheels(wheel_venv) -> Path:
    """The folder of the session's one build of this tree's wheel."""
    return wheel_venv.parent / "wheels"


def test_one_command_installs_this_version_there_and_remote_then_runs_it(slurm_testbed, login, tmp_path, wheels):
    project = login.workstation(tmp_path / "ws" / "proj")
    # git, flock and setsid stay; this machine's orchestrator goes. DVC stays, as a site's module gives it: the
    # venv made with --system-site-packages imports DVC from there but has no `dvc` command of its own, and
    # the recording job runs `dvc repro`.
    (tmp_path / "site-dvc").mkdir()
    (tmp_path / "site-dvc" / "dvc").symlink_to(shutil.which("dvc"))
    login.set_setup([f"export PATH=/usr/bin:/bin:{tmp_path / 'site-dvc'}"])
    one_error(login.orchestrator("status", "--remote", cwd=project), "not installed on login-node", "orchestrator remote install")
    assert not login.cluster_root.exists()

    python = str(Path(sys.executable).resolve())
    done = login.orchestrator("remote", "install", "--wheels", str(wheels), "--python", python, "--system-site-packages", cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    venv = login.cluster_root / ".orchestrator" / f"venv-{__version__}"
    assert f"{venv} runs orchestrator {__version__}" in done.stdout
    there = subprocess.run([venv / "bin/orchestrator", "--version"], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert there.stdout.split()[-1] == __version__
    # The venv's own copy, not this tree seen through --system-site-packages.
    where = subprocess.run(
        [venv / "bin/python", "-c", "import orchestrator; print(orchestrator.__file__)"], capture_output=True, text=True, cwd=tmp_path
    )
    assert where.stdout.startswith(str(venv)), where.stdout

    synced = login.orchestrator("remote", "sync", cwd=project)  # runs `orchestrator remote checkout` there: the venv's
    assert synced.returncode == 0, synced.stdout + synced.stderr
    status = login.orchestrator("status", "--remote", cwd=project)
    assert "not installed" not in status.stderr and "Traceback" not in status.stdout + status.stderr
    assert f"running `orchestrator status` on login-node in {login.cluster_root / 'proj'}" in status.stderr, status.stderr
    log = next((login.cluster_root / "proj" / ".orchestrator" / "remote").glob("*-status-*/log")).read_text()
    assert "command not found" not in log, log

    # And submit --remote runs there, with the installed venv's orchestrator, on the testbed.
    since = time.time()
    submitted = login.orchestrator("submit", "--remote", cwd=project)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    assert "probe@layout0" in submitted.stdout and "probe@layout1" in submitted.stdout
    names = Counter(j[1] for j in jobs_of(ACCOUNT, since, login.cluster_root / "proj", expect=3))
    assert names == {"probe@layout0": 1, "probe@layout1": 1, "orchestrator-record": 1}, names
    deadline = time.monotonic() + 240
    while (states := {j[2] for j in jobs_of(ACCOUNT, since, login.cluster_root / "proj")}) - {"COMPLETED"}:
        assert time.monotonic() < deadline and not states & {"FAILED", "CANCELLED", "TIMEOUT"}, states
        time.sleep(2)
    assert (login.cluster_root / "proj" / "out" / "1" / "rank1.txt").exists()  # the item ran there
    log = next(p for p in (login.cluster_root / "proj" / ".orchestrator" / "remote").glob("*-submit-*/log")).read_text()
    assert "command not found" not in log, log

    # Run again: the venv is repaired in place, the same version.
    again = login.orchestrator("remote", "install", "--wheels", str(wheels), "--python", python, "--system-site-packages", cwd=project)
    assert again.returncode == 0, again.stdout + again.stderr
