"""`orchestrator remote install` without ssh: what is sent (the wheel of this version from --wheels, never
another version's), the one install line (every value a positional parameter), the venv --remote then runs
(its bin first on PATH through login.setup), and the failures named (no Python new enough, pip failing)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from fakes import FakeRunner, ok
from support import HOSTILE_DIR

from orchestrator import __version__
from orchestrator.remote import install, session
from orchestrator.remote.connection import Connection
from orchestrator.remote.destination import Destination
from orchestrator.remote.session import Facts, Session, VersionMismatch
from orchestrator.util.runner import Completed
from orchestrator.util.ssh import RemoteError

OURS = f"dvc_slurm_orchestrator-{__version__}-py3-none-any.whl"
VENV = f"/scratch/p/.orchestrator/venv-{__version__}"


def _dest(setup=()) -> Destination:
    return Destination("lumi", "lumi", "/scratch/p", Path("/ws/proj"), "", tuple(setup))


def _ssh(installed: str = f"orchestrator, version {__version__}", rc: int = 0, stderr: str = ""):
    def answer(argv):
        script = shlex.split(argv[-1])[2]
        if script == install.INSTALL:
            out = f"{session.TAG} installed {installed}\n" if rc == 0 else ""
            return Completed(tuple(argv), rc, out, stderr)
        return Completed(tuple(argv), 0, "", "")

    return answer


def _wheels(tmp_path: Path, *names: str) -> Path:
    folder = tmp_path / "wheels"
    folder.mkdir()
    for name in names:
        (folder / name).write_bytes(b"PK")
    return folder


def test_the_wheel_of_this_version_is_sent_and_installed_offline_into_the_versions_venv(tmp_path):
    runner = FakeRunner({"ssh": _ssh(), "rsync": ok()}, installed={"ssh", "rsync"})
    wheels = _wheels(tmp_path, OURS, "dvc_slurm_orchestrator-0.0.9-py3-none-any.whl", "dvc-3.60.0-py3-none-any.whl")
    said: list[str] = []
    s = Session(Connection("lumi", runner), _dest(["module load cray-python"]), Facts("u", "/users/u", True, True, None))
    assert install.install(s, runner, wheels, "python3.11", False, said.append) == VENV
    (rsync,) = runner.called("rsync")
    sent = [Path(p).name for p in rsync[rsync.index("--") + 1 : -1]]
    assert sorted(sent) == sorted([OURS, "dvc-3.60.0-py3-none-any.whl"])  # never another version's wheel
    assert rsync[-1] == f"lumi:{VENV}.wheels/" and "-s" in rsync
    line = shlex.split(runner.called("ssh")[-1][-1])
    assert line[:3] == ["bash", "-lc", install.INSTALL]
    assert line[3:] == ["bash", "1", "module load cray-python", VENV, "python3.11", "", f"{VENV}.wheels", f"./{OURS}", "offline"]
    assert any("installing dvc-slurm-orchestrator" in s for s in said)


def test_without_wheels_or_a_source_tree_the_index_gives_this_version(tmp_path, monkeypatch):
    monkeypatch.setattr(install, "SOURCE_DIR", tmp_path / "no-source")
    runner = FakeRunner({"ssh": _ssh()}, installed={"ssh"})
    s = Session(Connection("lumi", runner), _dest(), Facts("u", "/users/u", True, True, "0.0.9"))
    install.install(s, runner, None, "python3", True, lambda line: None)
    assert not runner.called("rsync")
    words = shlex.split(runner.called("ssh")[-1][-1])
    assert words[-4:] == ["system", f"{VENV}.wheels", f"dvc-slurm-orchestrator=={__version__}", ""]


def test_from_a_source_tree_the_wheel_is_built_here(tmp_path, monkeypatch):
    tree = tmp_path / "src"
    tree.mkdir()
    (tree / "pyproject.toml").write_text("")
    monkeypatch.setattr(install, "SOURCE_DIR", tree)

    def pip_wheel(argv):
        Path(argv[argv.index("-w") + 1], OURS).write_bytes(b"PK")
        return Completed(tuple(argv), 0, "", "")

    runner = FakeRunner({"ssh": _ssh(), "rsync": ok()}, installed={"ssh", "rsync"})
    runner.answers[install.sys.executable] = pip_wheel
    s = Session(Connection("lumi", runner), _dest(), Facts("u", "/users/u", True, True, None))
    install.install(s, runner, None, "python3", False, lambda line: None)
    build = runner.called(install.sys.executable)[0]
    assert build[1:5] == ["-m", "pip", "wheel", "-q"] and build[-2:] == ["--", str(tree)]
    assert Path(runner.called("rsync")[0][-2]).name == OURS


@pytest.mark.parametrize(
    ("stderr", "rc", "message"),
    [
        (f"{session.TAG} old-python Python 3.6.15\n", 95, "no Python 3.10 or newer to make the venv on lumi: python3 is Python 3.6.15"),
        (f"{session.TAG} no-python python3.12\n", 95, "'python3' is not there"),
        ("ERROR: No matching distribution found for dvc>=3.60\n", 93, "installing on lumi failed: pip install failed (exit 93)"),
    ],
)
def test_a_failed_install_is_one_message(tmp_path, monkeypatch, stderr, rc, message):
    monkeypatch.setattr(install, "SOURCE_DIR", tmp_path / "no-source")
    runner = FakeRunner({"ssh": _ssh(rc=rc, stderr=stderr)}, installed={"ssh"})
    s = Session(Connection("lumi", runner), _dest(), Facts("u", "/users/u", True, True, None))
    with pytest.raises(RemoteError) as caught:
        install.install(s, runner, None, "python3", False, lambda line: None)
    assert message in caught.value.render() and caught.value.exit_code == 2


def test_a_venv_that_runs_another_version_after_the_install_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(install, "SOURCE_DIR", tmp_path / "no-source")
    runner = FakeRunner({"ssh": _ssh(installed="orchestrator, version 0.0.9")}, installed={"ssh"})
    s = Session(Connection("lumi", runner), _dest(), Facts("u", "/users/u", True, True, None))
    with pytest.raises(RemoteError, match="runs 'orchestrator, version 0.0.9' after the install"):
        install.install(s, runner, None, "python3", False, lambda line: None)


def _probe(venv_version: str | None, path_version: str | None):
    def answer(argv):
        words = shlex.split(argv[-1]) + ["", "", ""]  # connect's `true` is one word
        T = session.TAG
        if words[2] == session.PROBE:
            out = f"{T} user u\n{T} home /users/u\n{T} git yes\n{T} tools yes\n"
            return Completed(tuple(argv), 0, out + (f"{T} version orchestrator, version {path_version}\n" if path_version else ""), "")
        if words[2] == session.VENV_PROBE:
            assert words[4] == VENV
            return Completed(tuple(argv), 0, f"{T} venv orchestrator, version {venv_version}\n" if venv_version else "", "")
        return Completed(tuple(argv), 0, "", "")

    return answer


def test_remote_runs_the_venvs_orchestrator_where_it_is_there(tmp_path):
    runner = FakeRunner({"ssh": _probe(__version__, "0.0.9")}, installed={"ssh"})
    s = Session.open(Connection("lumi", runner), _dest(["module load x"]))
    assert s.facts.version == __version__
    assert s.dest.setup == ("module load x", f"PATH={VENV}/bin:$PATH; export PATH")


def test_another_version_there_and_no_venv_names_the_install_command():
    runner = FakeRunner({"ssh": _probe(None, "0.0.9")}, installed={"ssh"})
    with pytest.raises(VersionMismatch) as caught:
        Session.open(Connection("lumi", runner), _dest(), install="orchestrator remote install --cluster=lumi")
    text = caught.value.render()
    assert "lumi runs orchestrator 0.0.9" in text and "orchestrator remote install --cluster=lumi" in text
    assert caught.value.exit_code == 2
    assert len(runner.called("ssh")) == 3  # connect, probe, venv probe: nothing sent


def test_the_activation_line_keeps_a_hostile_folder_one_word(tmp_path):
    venv = tmp_path / HOSTILE_DIR / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "orchestrator").write_text("#!/bin/sh\necho 'orchestrator, version 9'\n")
    (venv / "bin" / "orchestrator").chmod(0o755)
    # IN the setup loop, as every script runs it: eval'd, then orchestrator found first on PATH.
    script = 'n=$1; shift; while [ "$n" -gt 0 ]; do eval "$1" || exit 96; shift; n=$((n-1)); done; orchestrator --version'
    line = session.command(script, setup=[session.activate(str(venv))])
    done = subprocess.run(["sh", "-c", line], capture_output=True, text=True, cwd=tmp_path)
    assert done.stdout == "orchestrator, version 9\n" and not (tmp_path / "ship-canary").exists()
    done = subprocess.run(["sh", "-c", session.command(session.VENV_PROBE, str(venv))], capture_output=True, text=True)
    assert session.markers(done.stdout) == [["venv", "orchestrator,", "version 9"]]
