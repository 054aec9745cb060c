"""Shared fixtures: throwaway DVC projects, tool requirements, golden-file updates."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_addoption(parser):
    parser.addoption(
        "--update-goldens",
        action="store_true",
        help="Rewrite tests/golden/* from the current templates instead of comparing (review the diff!).",
    )


@pytest.fixture
def update_goldens(request) -> bool:
    return request.config.getoption("--update-goldens") or os.environ.get("UPDATE_GOLDENS") == "1"


def require(tool: str) -> str:
    """The path of ``tool``; skip without it, except under CI where a skip is a failure."""
    path = shutil.which(tool)
    if path:
        return path
    message = f"{tool} is not installed"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message}, and CI=true: the test command must install it")
    pytest.skip(message)


def make_project(where: Path, dvc_yaml: str | None = None, params_yaml: str | None = None) -> Path:
    """A DVC project (no git) with the shipped pipeline, or the given files."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "dvc.yaml").write_text(dvc_yaml if dvc_yaml is not None else (ROOT / "dvc.yaml").read_text())
    (where / "params.yaml").write_text(params_yaml if params_yaml is not None else (ROOT / "params.yaml").read_text())
    subprocess.run(["dvc", "init", "--no-scm", "-q"], cwd=where, check=True)
    return where


@pytest.fixture
def project(tmp_path) -> Path:
    return make_project(tmp_path / "project")


@pytest.fixture(scope="session")
def slurm_testbed():
    """The project's two-node Slurm testbed, brought up once per session (`orchestrator testbed up`).

    Skips without root or apt-get (the testbed installs Debian packages and starts
    system daemons), except under CI=true, where that is a failure.
    """
    from orchestrator import testbed

    reason = None
    if os.geteuid() != 0:
        reason = "the Slurm testbed needs root"
    elif shutil.which("apt-get") is None:
        reason = "the Slurm testbed needs Debian's apt-get"
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}, and CI=true: CI must run the Slurm tests")
        pytest.skip(reason)
    settings = testbed.Settings.for_this_machine()
    testbed.Testbed(settings, timeout=180).up()
    return settings
