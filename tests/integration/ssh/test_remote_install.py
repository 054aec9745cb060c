"""`orchestrator remote install` over the loopback sshd: from a workstation clone, and from a tool installed
from its wheel (no source tree: the wheel it was installed from is sent, or, that file gone, its installed
files re-packed), the one command puts this side's version in a venv under the cluster folder of a login
node whose PATH has no orchestrator, and `--remote` then runs that venv's (`submit --remote` on the
testbed). Before it, --remote names the command (exit 2, nothing sent).

Feasible on a small machine: the wheel is built once here, and the venv there is made with
--system-site-packages from this interpreter, whose site-packages already hold DVC and the other
dependencies, so pip installs only the orchestrator's own wheel: offline (--wheels DIR --no-index) from
the clone, with this machine's package index (what pip here reaches) beside it from the wheel's install."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from support import ACCOUNT, jobs_of, one_error, venv_with

from orchestrator import __version__

pytestmark = [pytest.mark.ssh, pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture
def wheels(wheel_venv) -> Path:
    """The folder of the session's one build of this tree's wheel."""
    return wheel_venv.parent / "wheels"


def _login_without_orchestrator(login, tmp_path: Path) -> None:
    """The login node's PATH without this machine's orchestrator. git, flock and setsid stay. DVC stays, as a
    site's module gives it: the venv made with --system-site-packages imports DVC from there but has no `dvc`
    command of its own, and the recording job runs `dvc repro`."""
    (tmp_path / "site-dvc").mkdir()
    (tmp_path / "site-dvc" / "dvc").symlink_to(shutil.which("dvc"))
    login.set_setup([f"export PATH=/usr/bin:/bin:{tmp_path / 'site-dvc'}"])


def _installed_there(login, tmp_path: Path, done: subprocess.CompletedProcess) -> Path:
    """The venv there after a remote install that ``done`` reports: this version, its own copy."""
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
    return venv


def _submit_runs_there(login, project: Path, orchestrator: Callable[..., subprocess.CompletedProcess]) -> None:
    """submit --remote from ``project`` (by ``orchestrator``, this side) runs there, with the installed venv's
    orchestrator, on the testbed."""
    since = time.time()
    submitted = orchestrator("submit", "--remote", cwd=project)
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


def test_one_command_installs_this_version_there_and_remote_then_runs_it(slurm_testbed, login, tmp_path, wheels):
    project = login.workstation(tmp_path / "ws" / "proj")
    _login_without_orchestrator(login, tmp_path)
    one_error(login.orchestrator("status", "--remote", cwd=project), "not installed on login-node", "orchestrator remote install")
    assert not login.cluster_root.exists()

    python = str(Path(sys.executable).resolve())
    offline = ["--wheels", str(wheels), "--no-index", "--python", python, "--system-site-packages"]
    done = login.orchestrator("remote", "install", *offline, cwd=project)
    assert "(only the wheels sent: --no-index)" in done.stderr, done.stderr
    _installed_there(login, tmp_path, done)

    synced = login.orchestrator("remote", "sync", cwd=project)  # runs `orchestrator remote checkout` there: the venv's
    assert synced.returncode == 0, synced.stdout + synced.stderr
    status = login.orchestrator("status", "--remote", cwd=project)
    assert "not installed" not in status.stderr and "Traceback" not in status.stdout + status.stderr
    assert f"running `orchestrator status` on login-node in {login.cluster_root / 'proj'}" in status.stderr, status.stderr
    log = next((login.cluster_root / "proj" / ".orchestrator" / "remote").glob("*-status-*/log")).read_text()
    assert "command not found" not in log, log

    # And submit --remote runs there, with the installed venv's orchestrator, on the testbed.
    _submit_runs_there(login, project, login.orchestrator)

    # Run again: the venv is repaired in place, the same version.
    again = login.orchestrator("remote", "install", *offline, cwd=project)
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_tool_installed_from_its_wheel_installs_itself_there(slurm_testbed, login, tmp_path, this_wheel):
    """Install's own way (pip install dvc_slurm_orchestrator-VERSION-py3-none-any.whl), then remote install
    with no --wheels: no source tree to build from, and no index that has the orchestrator (issue 53)."""
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    wheel = downloads / this_wheel.name
    shutil.copy(this_wheel, wheel)
    tool = venv_with(wheel, tmp_path / "tool-venv", system_site_packages=True)
    project = login.workstation(tmp_path / "ws" / "proj")
    _login_without_orchestrator(login, tmp_path)
    python = str(Path(sys.executable).resolve())

    def tool_run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
        """`orchestrator ARGS` of the tool installed from its wheel, as the login fixture runs this tree's."""
        return subprocess.run([tool / "bin/orchestrator", *args], cwd=cwd, env=login.env, capture_output=True, text=True, timeout=300)

    def remote_install() -> subprocess.CompletedProcess:
        return tool_run("remote", "install", "--python", python, "--system-site-packages", cwd=project)

    # The workstation's orchestrator is the wheel's copy, which has no source tree beside it (run outside this tree:
    # `python -c` puts the working folder first on sys.path).
    done = subprocess.run(
        [tool / "bin/python", "-c", "import orchestrator; print(orchestrator.__file__)"], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.stdout.startswith(str(tool)), done.stdout

    done = remote_install()
    assert f"sending the wheel this orchestrator was installed from: {wheel}" in done.stderr, done.stdout + done.stderr
    assert "building the wheel" not in done.stderr and "--no-index" not in done.stderr
    venv = _installed_there(login, tmp_path, done)
    assert [p.name for p in Path(f"{venv}.wheels").iterdir()] == [wheel.name]

    # That wheel deleted since: the installed files, re-packed, repair the venv in place.
    wheel.unlink()
    done = remote_install()
    assert "re-packed the installed files of dvc-slurm-orchestrator" in done.stderr, done.stdout + done.stderr
    _installed_there(login, tmp_path, done)

    # submit --remote from that same tool runs there with the venv's orchestrator.
    _submit_runs_there(login, project, tool_run)


def test_a_failing_pip_there_is_named_by_what_pip_said(login, tmp_path, wheels):
    """A venv without the system's packages needs the dependencies: from a package index that refuses the
    connection, the message says pip cannot reach it and gives the way for a node without the internet; with
    --no-index and only the orchestrator's wheel sent, it names the requirement missing among the wheels, and
    no word of the internet. Either way pip's own last line is quoted, and nothing is a traceback."""
    project = login.workstation(tmp_path / "ws" / "proj")
    # No pip configuration of this machine's (its find-links, its local index), and an index nothing answers at. One
    # retry (pip's default is 5): the retry's warning is what tells a refused connection from an index that lacks a
    # requirement (pip says nothing of the last attempt's error under -q).
    index = "export PIP_CONFIG_FILE=/dev/null PIP_INDEX_URL=http://127.0.0.1:9/simple PIP_RETRIES=1 PIP_TIMEOUT=5"
    login.set_setup(["export PATH=/usr/bin:/bin", index])
    python = str(Path(sys.executable).resolve())

    # --wheels: this version's wheel built once for the session (as from a clone, but with no build here each time).
    unreachable = login.orchestrator("remote", "install", "--wheels", str(wheels), "--python", python, cwd=project)
    text = one_error(unreachable, "could not install the dependencies of dvc-slurm-orchestrator: pip there cannot reach its package index")
    assert "Connection refused" in text and "ERROR: No matching distribution found for" in text, text
    assert f"--wheels {wheels} --no-index" in text and f"pip download -d {wheels}" in text, text

    offline = login.orchestrator("remote", "install", "--wheels", str(wheels), "--no-index", "--python", python, cwd=project)
    text = one_error(offline, "is not among the wheels sent (--no-index", "ERROR: No matching distribution found for")
    assert "internet" not in text and "reach" not in text, text
