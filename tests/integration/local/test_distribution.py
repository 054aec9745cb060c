"""The release, as CI builds it every run: this tree's sdist and the wheel built from that sdist
(`python -m build`: the session's ``this_distributions``, which every wheel test shares), their
metadata read as the package index reads it (`twine check --strict`) and checked against
pyproject.toml and the README, and the wheel installed in a clean venv run. Publishing is then
`twine upload` of the two files (docs/development/release.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile

import pytest
from packaging.metadata import Metadata
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from support import ROOT, skip_or_fail

from orchestrator import __version__

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

pytestmark = pytest.mark.slow  # the builds, once per run (~8 s of CPU), and a venv

NAME = "dvc-slurm-orchestrator"
STEM = f"dvc_slurm_orchestrator-{__version__}"


@pytest.fixture(scope="module")
def built(this_distributions):
    if this_distributions.sdist is None:
        skip_or_fail("the package `build` is not installed (the test extra brings it): no sdist was built")
    return this_distributions


def _metadata(built) -> dict[str, Metadata]:
    """Each file's core metadata, parsed and validated by `packaging` (every field's syntax, as the index checks it)."""
    with zipfile.ZipFile(built.wheel) as wheel, tarfile.open(built.sdist) as sdist:
        texts = {
            "wheel": wheel.read(f"{STEM}.dist-info/METADATA").decode(),
            "sdist": sdist.extractfile(f"{STEM}/PKG-INFO").read().decode(),  # type: ignore[union-attr]
        }
    return {kind: Metadata.from_email(text, validate=True) for kind, text in texts.items()}


def _key(requirement: str | Requirement) -> str:
    r = Requirement(str(requirement))
    return f"{canonicalize_name(r.name)}{sorted(r.extras)}{r.specifier}; {r.marker}"


def test_the_package_index_would_accept_both(built):
    if subprocess.run([sys.executable, "-c", "import twine"], capture_output=True).returncode:
        skip_or_fail("twine is not installed (the test extra brings it)")
    argv = [sys.executable, "-m", "twine", "check", "--strict", str(built.sdist), str(built.wheel)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2, done.stdout


def test_their_metadata_is_pyproject_s_and_the_readme(built):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    readme = (ROOT / "README.md").read_text()
    assert built.wheel.name == f"{STEM}-py3-none-any.whl" and built.sdist.name == f"{STEM}.tar.gz"
    for kind, meta in _metadata(built).items():
        assert (meta.name, str(meta.version), str(meta.requires_python)) == (NAME, __version__, project["requires-python"]), kind
        assert meta.summary == project["description"] and meta.license_expression == project["license"], kind
        assert meta.description_content_type == "text/markdown" and meta.description == readme, kind
        required = meta.requires_dist or []
        plain = sorted(_key(r) for r in required if "extra" not in str(r.marker))
        assert plain == sorted(_key(d) for d in project["dependencies"]), kind
        extras = project["optional-dependencies"]
        assert sorted(meta.provides_extra or []) == sorted(extras), kind
        for extra, deps in extras.items():
            named = {canonicalize_name(r.name) for r in required if r.marker and r.marker.evaluate({"extra": extra})}
            assert {canonicalize_name(Requirement(d).name) for d in deps} <= named, (kind, extra)


def test_the_wheel_brings_the_command_and_the_sdist_the_whole_source(built):
    with zipfile.ZipFile(built.wheel) as wheel:
        names = set(wheel.namelist())
        scripts = wheel.read(f"{STEM}.dist-info/entry_points.txt").decode()
    assert "orchestrator = orchestrator.cli:main" in scripts
    assert {"orchestrator/_templates/sbatch.sh.j2", "orchestrator/cli/__init__.py", "experiments/__init__.py"} <= names
    assert not any(n.startswith(("tests/", "docs/")) for n in names)
    with tarfile.open(built.sdist) as sdist:
        files = {n.removeprefix(f"{STEM}/") for n in sdist.getnames()}
    # What a wheel is built from (the templates are forced into the package from the top level),
    # and the pipeline, docs and tests: an unpacked sdist is the project, `pip install .` there works.
    assert {"pyproject.toml", "README.md", "templates/sbatch.sh.j2", "containers/ci.def.j2", "dvc.yaml", "tests/conftest.py"} <= files
    assert not any(part in n.split("/") for n in files for part in (".git", "__pycache__", ".orchestrator")), sorted(files)[:20]


CHECK = """
import importlib.metadata as md, sys, orchestrator
from packaging.requirements import Requirement
unmet = []
for text in md.requires("dvc-slurm-orchestrator") or []:
    r = Requirement(text)
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue
    try:
        have = md.version(r.name)
    except md.PackageNotFoundError:
        have = None
    if have is None or not r.specifier.contains(have, prereleases=True):
        unmet.append(f"{r} (installed: {have})")
print(orchestrator.__file__)
print("unmet:", unmet)
sys.exit(1 if unmet else 0)
"""


def test_the_wheel_in_a_clean_venv_runs(wheel_venv, tmp_path):
    """The venv sees this Python's packages (DVC and the rest, as a login node with them has) but
    holds only the wheel: the command is the wheel's, its dependencies met with what is there."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{wheel_venv / 'bin'}{os.pathsep}{env['PATH']}"

    def run(*argv: str) -> str:
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
        return done.stdout

    assert run(str(wheel_venv / "bin/orchestrator"), "--version").strip() == f"orchestrator, version {__version__}"
    shown = run(str(wheel_venv / "bin/orchestrator"), "clusters")
    assert "lumi" in shown and "juwels-booster" in shown, shown
    found = run(str(wheel_venv / "bin/python"), "-c", CHECK)
    assert str(wheel_venv) in found.splitlines()[0] and "unmet: []" in found, found
