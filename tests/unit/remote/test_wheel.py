"""The wheel `orchestrator remote install` sends: built from this tree, installed into a clean venv (no
dependencies: only the package's own files are looked at), it carries the job templates and the image
definition templates, and a project without containers/ finds every definition the shipped images.yaml names."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from support import ROOT, venv_with

from orchestrator import __version__

pytestmark = pytest.mark.slow

CHECK = """
import sys
from pathlib import Path
from orchestrator.containers import images
project, names = Path(sys.argv[1]), sys.argv[2:]
found = {n: images.template_path(project, n) for n in names}
print({n: str(p) for n, p in found.items()})
assert all(p is not None and "site-packages" in str(p) for p in found.values()), found
assert (images.PACKAGE_DIR / "_templates" / "sbatch.sh.j2").is_file()
"""


def test_a_wheel_in_a_clean_venv_carries_the_job_and_definition_templates(tmp_path, this_wheel):
    wheel = this_wheel
    assert wheel.name.startswith(f"dvc_slurm_orchestrator-{__version__}-")
    venv = venv_with(wheel, tmp_path / "venv")
    shipped = yaml.safe_load((ROOT / "containers/images.yaml").read_text())
    names = sorted({image["definition"] for image in shipped.values()})
    project = tmp_path / "project"  # a project of its own: no containers/ folder
    project.mkdir()
    done = subprocess.run([venv / "bin/python", "-c", CHECK, str(project), *names], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert all(f"_containers/{n}" in done.stdout for n in names), done.stdout
