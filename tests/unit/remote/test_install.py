"""`orchestrator remote install` without ssh: what is sent (the wheel of this version from --wheels, never
another version's; from a source tree, built; from a wheel's install, that wheel or the installed files
re-packed), the one install line (every value a positional parameter; --no-index only when asked), the venv
--remote then runs (its bin first on PATH through login.setup), and the failures named (no Python new enough,
pip failing: what pip said, and the way for a node without the internet only where pip could not reach its index)."""

from __future__ import annotations

import base64
import hashlib
import json
import shlex
import subprocess
import zipfile
from importlib import metadata
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
    """--wheels DIR --no-index: a login node without the internet."""
    runner = FakeRunner({"ssh": _ssh(), "rsync": ok()}, installed={"ssh", "rsync"})
    wheels = _wheels(tmp_path, OURS, "dvc_slurm_orchestrator-0.0.9-py3-none-any.whl", "dvc-3.60.0-py3-none-any.whl")
    said: list[str] = []
    s = Session(Connection("lumi", runner), _dest(["module load cray-python"]), Facts("u", "/users/u", True, True, None))
    assert install.install(s, runner, wheels, "python3.11", False, said.append, no_index=True) == VENV
    (rsync,) = runner.called("rsync")
    sent = [Path(p).name for p in rsync[rsync.index("--") + 1 : -1]]
    assert sorted(sent) == sorted([OURS, "dvc-3.60.0-py3-none-any.whl"])  # never another version's wheel
    assert rsync[-1] == f"lumi:{VENV}.wheels/" and "-s" in rsync
    line = shlex.split(runner.called("ssh")[-1][-1])
    assert line[:3] == ["bash", "-lc", install.INSTALL]
    assert line[3:] == ["bash", "1", "module load cray-python", VENV, "python3.11", "", f"{VENV}.wheels", f"./{OURS}", "offline"]
    assert any("installing dvc-slurm-orchestrator" in s for s in said)


def test_wheels_alone_are_sent_along_and_the_index_is_still_used(tmp_path):
    runner = FakeRunner({"ssh": _ssh(), "rsync": ok()}, installed={"ssh", "rsync"})
    wheels = _wheels(tmp_path, OURS, "dvc-3.60.0-py3-none-any.whl")
    s = Session(Connection("lumi", runner), _dest(), Facts("u", "/users/u", True, True, None))
    said: list[str] = []
    install.install(s, runner, wheels, "python3", False, said.append)
    assert shlex.split(runner.called("ssh")[-1][-1])[-3:] == [f"{VENV}.wheels", f"./{OURS}", ""]  # no --no-index
    assert not any("--no-index" in line for line in said)


def test_without_a_source_tree_or_an_installed_wheel_the_error_names_wheels(tmp_path, monkeypatch):
    monkeypatch.setattr(install, "SOURCE_DIR", tmp_path / "no-source")
    monkeypatch.setattr(install, "running_distribution", lambda: None)
    runner = FakeRunner({"ssh": _ssh(), "rsync": ok()}, installed={"ssh", "rsync"})
    s = Session(Connection("lumi", runner), _dest(), Facts("u", "/users/u", True, True, "0.0.9"))
    with pytest.raises(RemoteError) as caught:
        install.install(s, runner, None, "python3", True, lambda line: None)
    text = caught.value.render()
    assert f"no wheel of dvc-slurm-orchestrator {__version__} to send" in text and "--wheels DIR" in text
    assert caught.value.exit_code == 2 and not runner.called("ssh") and not runner.called("rsync")  # nothing sent, nothing run


# --- a tool installed from a wheel: the installed distribution, as pip leaves it --------------------------------------

INFO = f"dvc_slurm_orchestrator-{__version__}.dist-info"
PACKAGE = {"orchestrator/__init__.py": b"__version__ = 'x'\n", "orchestrator/a b,c.py": b"x = 1\n"}
DIST_INFO = {
    "METADATA": f"Metadata-Version: 2.1\nName: dvc-slurm-orchestrator\nVersion: {__version__}\n".encode(),
    "WHEEL": b"Wheel-Version: 1.0\nGenerator: hatchling\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    "entry_points.txt": b"[console_scripts]\norchestrator = orchestrator.cli:main\n",
}


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _original_wheel(where: Path) -> Path:
    """The wheel the fake install came from."""
    where.mkdir(parents=True, exist_ok=True)
    wheel = where / OURS
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in [*PACKAGE.items(), *((f"{INFO}/{n}", d) for n, d in DIST_INFO.items())]:
            zf.writestr(name, data)
    return wheel


def _installed(tmp_path: Path, came_from: Path | None = None, extra_record: str = "") -> metadata.Distribution:
    """What `pip install x.whl` leaves in a venv's site-packages: the files, their bytecode, the entry point's
    script in bin/, the installer's files, and a RECORD listing them all with their hashes."""
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    files = {**PACKAGE, "orchestrator/__pycache__/__init__.cpython-311.pyc": b"\0pyc"}
    files |= {f"{INFO}/{n}": d for n, d in DIST_INFO.items()} | {f"{INFO}/INSTALLER": b"pip\n", f"{INFO}/REQUESTED": b""}
    if came_from is not None:
        digest = hashlib.sha256(came_from.read_bytes()).hexdigest()
        files[f"{INFO}/direct_url.json"] = json.dumps({"url": came_from.as_uri(), "archive_info": {"hashes": {"sha256": digest}}}).encode()
    files["../../../bin/orchestrator"] = b"#!/venv/bin/python\n"
    for name, data in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(data)
    record = "".join(f'"{n}",{_hash(d)},{len(d)}\n' for n, d in files.items()) + f"{INFO}/RECORD,,\n" + extra_record
    (site / INFO / "RECORD").write_text(record)
    return metadata.PathDistribution(site / INFO)


def _from_installed(tmp_path, monkeypatch, dist: metadata.Distribution) -> tuple[FakeRunner, list[str]]:
    """`remote install` with no --wheels, run from ``dist``: the runner, and what it said."""
    monkeypatch.setattr(install, "SOURCE_DIR", tmp_path / "no-source")
    monkeypatch.setattr(install, "running_distribution", lambda: dist)
    kept = tmp_path / "sent"  # rsync's copy of what was sent (the temporary folder is gone afterwards)
    kept.mkdir()

    def rsync(argv):
        for f in argv[argv.index("--") + 1 : -1]:
            (kept / Path(f).name).write_bytes(Path(f).read_bytes())
        return Completed(tuple(argv), 0, "", "")

    runner = FakeRunner({"ssh": _ssh(), "rsync": rsync}, installed={"ssh", "rsync"})
    said: list[str] = []
    s = Session(Connection("lumi", runner), _dest(), Facts("u", "/users/u", True, True, None))
    install.install(s, runner, None, "python3", False, said.append)
    assert shlex.split(runner.called("ssh")[-1][-1])[-2:] == [f"./{OURS}", ""]  # the index for the rest
    return runner, said


def test_installed_from_a_wheel_that_is_still_there_sends_that_wheel(tmp_path, monkeypatch):
    original = _original_wheel(tmp_path / "downloads dir")
    runner, said = _from_installed(tmp_path, monkeypatch, _installed(tmp_path, came_from=original))
    (rsync,) = runner.called("rsync")
    assert rsync[rsync.index("--") + 1 : -1] == [str(original)]
    assert f"sending the wheel this orchestrator was installed from: {original}" in said


def test_a_wheel_changed_or_gone_since_the_install_is_not_sent_the_installed_files_are(tmp_path, monkeypatch):
    original = _original_wheel(tmp_path / "downloads")
    dist = _installed(tmp_path, came_from=original)
    original.write_bytes(original.read_bytes() + b"\0")  # another file of the same name now
    _, said = _from_installed(tmp_path, monkeypatch, dist)
    assert any("has changed since: not sent" in line for line in said)
    assert any(line.startswith("re-packed the installed files") for line in said)
    with zipfile.ZipFile(tmp_path / "sent" / OURS) as zf:
        names = zf.namelist()
        # The original's files, byte for byte: no bytecode, no script, none of the installer's files.
        assert sorted(names) == sorted([*PACKAGE, *(f"{INFO}/{n}" for n in DIST_INFO), f"{INFO}/RECORD"])
        assert names[-1] == f"{INFO}/RECORD" and all(zf.read(n) == d for n, d in PACKAGE.items())
        record = zf.read(f"{INFO}/RECORD").decode()
        assert '"orchestrator/a b,c.py",' + _hash(PACKAGE["orchestrator/a b,c.py"]) in record  # a comma in a name: quoted
        assert zf.testzip() is None


def test_installed_from_an_index_the_installed_files_are_sent_as_a_wheel(tmp_path, monkeypatch):
    runner, said = _from_installed(tmp_path, monkeypatch, _installed(tmp_path))
    assert [Path(p).name for p in runner.called("rsync")[0][-2:-1]] == [OURS]
    assert any(line.startswith("re-packed the installed files") for line in said)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda site: (site / "orchestrator/__init__.py").write_text("patched"), "was changed after the install"),
        (lambda site: (site / "orchestrator/__init__.py").unlink(), "cannot be read"),
        (lambda site: (site / INFO / "RECORD").write_text(f"{INFO}/METADATA,,\n"), "has no RECORD"),
    ],
)
def test_installed_files_that_are_not_the_installs_are_never_sent(tmp_path, monkeypatch, change, message):
    dist = _installed(tmp_path)
    change(tmp_path / "venv" / "lib" / "python3.11" / "site-packages")
    with pytest.raises(RemoteError) as caught:
        _from_installed(tmp_path, monkeypatch, dist)
    text = caught.value.render()
    assert message in text and "--wheels DIR" in text and "nothing was sent" in text


def test_a_data_file_installed_outside_site_packages_cannot_be_put_back(tmp_path, monkeypatch):
    dist = _installed(tmp_path, extra_record=f"../../../share/x.txt,{_hash(b'')},0\n")
    with pytest.raises(RemoteError, match=r"installed \.\./\.\./\.\./share/x\.txt outside site-packages"):
        _from_installed(tmp_path, monkeypatch, dist)


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
    ],
)
def test_a_failed_install_is_one_message(tmp_path, monkeypatch, stderr, rc, message):
    runner = FakeRunner({"ssh": _ssh(rc=rc, stderr=stderr), "rsync": ok()}, installed={"ssh", "rsync"})
    s = Session(Connection("lumi", runner), _dest(), Facts("u", "/users/u", True, True, None))
    with pytest.raises(RemoteError) as caught:
        install.install(s, runner, _wheels(tmp_path, OURS), "python3", False, lambda line: None)
    assert message in caught.value.render() and caught.value.exit_code == 2


OFFLINE_PIP = (
    "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by "
    "'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f>: Failed to establish a new "
    "connection: [Errno -3] Temporary failure in name resolution')': /simple/dvc/\n"
    * 3
    + "ERROR: Could not find a version that satisfies the requirement dvc<4,>=3.60 (from dvc-slurm-orchestrator) (from versions: none)\n"
    "ERROR: No matching distribution found for dvc<4,>=3.60\n"
)
MISSING_PIP = (
    "ERROR: Could not find a version that satisfies the requirement submitit>=1.5 (from versions: 1.0.0)\n"
    "ERROR: No matching distribution found for submitit>=1.5\n"
)


@pytest.mark.parametrize(
    ("stderr", "rc", "no_index", "headline", "hinted"),
    [
        # pip could not reach its index: that is said, and then the way for a node without the internet.
        (OFFLINE_PIP, 92, False, "could not install the dependencies of dvc-slurm-orchestrator: pip there cannot reach its package index",
         ["pip download -d", "--no-index", "HTTPS_PROXY"]),
        # The index is reached and lacks a requirement: that is the cause, and no word of the internet.
        (MISSING_PIP, 92, False, "the login node's package index has no submitit>=1.5", []),
        (MISSING_PIP, 92, True, "submitit>=1.5 is not among the wheels sent (--no-index", ["pip download -d"]),
        ("ERROR: dvc_slurm_orchestrator-0.1.0-py3-none-any.whl is not a supported wheel on this platform.\n", 93, False,
         f"pip could not install the wheel of dvc-slurm-orchestrator {__version__} (", []),
    ],
)  # fmt: skip
def test_a_failed_pip_says_what_pip_said_and_hints_only_at_its_cause(tmp_path, stderr, rc, no_index, headline, hinted):
    runner = FakeRunner({"ssh": _ssh(rc=rc, stderr=stderr), "rsync": ok()}, installed={"ssh", "rsync"})
    s = Session(Connection("lumi", runner), _dest(), Facts("u", "/users/u", True, True, None))
    with pytest.raises(RemoteError) as caught:
        install.install(s, runner, _wheels(tmp_path, OURS), "python3", False, lambda line: None, no_index=no_index)
    text = caught.value.render()
    assert caught.value.headline.startswith("installing on lumi failed: pip could not install") and headline in text, text
    last = stderr.strip().splitlines()[-1]
    assert last in caught.value.problems  # pip's own last word
    assert len(caught.value.problems) <= 3, caught.value.problems  # one retry line, not every one
    for hint in hinted:
        assert any(hint in h for h in caught.value.hints), caught.value.hints
    if not hinted:
        assert not caught.value.hints and "internet" not in text and "--wheels" not in text, text
    assert "Traceback" not in text and caught.value.exit_code == 2


def test_a_venv_that_runs_another_version_after_the_install_is_refused(tmp_path):
    runner = FakeRunner({"ssh": _ssh(installed="orchestrator, version 0.0.9"), "rsync": ok()}, installed={"ssh", "rsync"})
    s = Session(Connection("lumi", runner), _dest(), Facts("u", "/users/u", True, True, None))
    with pytest.raises(RemoteError, match="runs 'orchestrator, version 0.0.9' after the install"):
        install.install(s, runner, _wheels(tmp_path, OURS), "python3", False, lambda line: None)


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
