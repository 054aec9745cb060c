"""`orchestrator container list | exec | shell | clean` with the real Apptainer (marker ``apptainer``):
a command in the CI image sees the workspace bound, runs in the current folder and returns its
exit status; `list` follows a real build and a change; `clean --yes` frees what it printed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support import IMAGE_CACHE, container_cli, make_tiny, run_orchestrator

from orchestrator.containers import build, catalog, leftovers
from orchestrator.containers.progress import size_text
from orchestrator.util.files import sha256_file

pytestmark = pytest.mark.apptainer


@pytest.fixture
def ci_sif(request, apptainer) -> Path:
    """A CI image (Debian, Python, a shell): the newest in the persistent cache, else the ci_image fixture's build."""
    cached = sorted(IMAGE_CACHE.glob("ci-*.sif"), key=lambda p: p.stat().st_mtime, reverse=True)
    return cached[0] if cached else request.getfixturevalue("ci_image")


@pytest.fixture
def with_ci(tmp_path, ci_sif) -> Path:
    """A project whose images.yaml has `ci`, with the CI image in place as built."""
    project = make_tiny(tmp_path / "proj")
    (project / "containers" / "images.yaml").write_text(
        (project / "containers" / "images.yaml").read_text() + "ci:\n  definition: tiny.def.j2\n  source: [pkg, pyproject.toml]\n"
    )
    (project / "params.yaml").write_text("orchestrator:\n  cluster: local\n")
    sif = project / build.IMAGES_DIR / "ci.sif"
    sif.parent.mkdir(parents=True)
    try:
        os.link(ci_sif, sif)  # the cache's copy, read only by the test
    except OSError:
        shutil.copy(ci_sif, sif)
    (project / "sub").mkdir()
    return project


PROBE = (
    'echo "pwd=$(pwd)"; echo "container=$APPTAINER_CONTAINER"; echo "pythonpath=$PYTHONPATH"; '
    "echo mounts; awk '{print $5}' /proc/self/mountinfo; cat ../pkg/mod.py; touch made-inside; exit 7"
)


def test_exec_binds_the_workspace_runs_in_the_current_folder_and_returns_the_exit_code(with_ci):
    sub = (with_ci / "sub").resolve()
    env = {**os.environ, "APPTAINER_BIND": "/leaked-by-an-outer-container"}
    proc = run_orchestrator("container", "exec", "--project", "..", "ci", "--", "sh", "-c", PROBE, cwd=sub, env=env, timeout=300)
    assert proc.returncode == 7, proc.stdout + proc.stderr
    out = proc.stdout.splitlines()
    assert f"pwd={sub}" in out  # the job's --pwd: the current folder inside the project
    assert f"container={(with_ci / build.IMAGES_DIR / 'ci.sif').resolve()}" in out  # really in the image
    assert next(line for line in out if line.startswith("pythonpath=")).startswith(f"pythonpath={sub}")  # the run dir's code first
    mounts = out[out.index("mounts") + 1 :]
    assert str(with_ci.resolve()) in mounts and not any(m.startswith("/leaked") for m in mounts)  # cleared, as in a job
    assert "x = 1" in out and (sub / "made-inside").is_file()  # the workspace, read and written from inside


def test_shell_runs_what_it_is_given_in_the_image(with_ci):
    proc = subprocess.run(
        [*_orchestrator(), "container", "shell", "ci"],
        cwd=with_ci,
        input='echo "in-image $APPTAINER_CONTAINER"; exit 4\n',
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert f"in-image {(with_ci / build.IMAGES_DIR / 'ci.sif').resolve()}" in proc.stdout


def test_exec_of_an_image_not_built_says_how_to_build_it(with_ci):
    proc = run_orchestrator("container", "exec", "tiny", "--", "true", cwd=with_ci)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "error: image 'tiny' is not built yet (no .orchestrator/images/tiny.sif): run `orchestrator container build tiny`"
    )


def test_list_follows_a_build_and_a_change(apptainer, tmp_path):
    project = make_tiny(tmp_path / "proj")
    built, _ = container_cli("build", "tiny", cwd=project, timeout=300)
    assert built.returncode == 0, built.stderr

    listed, seconds = container_cli("list", "--json", cwd=project)
    assert listed.returncode == 0, listed.stderr
    found = {e["name"]: e for e in json.loads(listed.stdout)}
    sif = project / build.IMAGES_DIR / "tiny.sif"
    assert (found["tiny"]["state"], found["tiny"]["built"], found["tiny"]["size_bytes"]) == ("up to date", True, sif.stat().st_size)
    assert found["tiny"]["sif_sha256"] == "sha256:" + sha256_file(sif)
    assert found["tiny"]["content_hash"] == (project / "containers" / "tiny.digest").read_text().strip()  # what DVC tracks
    assert (found["site"]["state"], found["site"]["built"]) == ("invalid", False)
    assert seconds < 3.0, f"list took {seconds:.2f} s of CPU (Python's start-up included)"

    (project / "pkg" / "mod.py").write_text("x = 2\n")
    table, _ = container_cli("list", cwd=project)
    assert re.search(r"tiny\s+stale: changed: pkg/mod\.py", table.stdout), table.stdout
    assert container_cli("build", "tiny", cwd=project, timeout=300)[0].returncode == 0
    assert re.search(r"tiny\s+up to date\s", container_cli("list", cwd=project)[0].stdout)


def test_clean_yes_frees_what_it_printed(apptainer, tmp_path):
    project = make_tiny(tmp_path / "proj")
    assert container_cli("build", "tiny", cwd=project, timeout=300)[0].returncode == 0
    folder = project / build.IMAGES_DIR
    sif = folder / "tiny.sif"
    shutil.copy2(sif, folder / "retired.sif")  # an image whose entry was removed from images.yaml
    shutil.copy2(build.stamp_path(sif), folder / "retired.sif.json")
    child = subprocess.Popen(["true"])
    child.wait()
    stopped = leftovers.make_build_dir(leftovers.build_dir(folder, "tiny", child.pid))  # what a killed build leaves
    shutil.copy2(sif, stopped / "rootfs-part")
    shutil.copy2(sif, leftovers.temp_image(sif, child.pid))
    before = _allocated(folder)
    kept = {"tiny.sif", "tiny.sif.json", "tiny.build.log"}

    dry, _ = container_cli("clean", "--dry-run", cwd=project)
    assert dry.returncode == 0, dry.stderr
    total = next(line for line in dry.stdout.splitlines() if re.fullmatch(r"\d+ items?, .* in all", line))
    assert "retired.sif" in dry.stdout and f".build-tiny-{child.pid}" in dry.stdout and "dry run: nothing removed" in dry.stdout
    assert _allocated(folder) == before

    done, _ = container_cli("clean", "--yes", cwd=project)
    assert done.returncode == 0, done.stderr
    freed = before - _allocated(folder)
    assert freed >= 3 * sif.stat().st_size
    assert done.stdout.splitlines()[-1] == f"removed {total.split()[0]} items, freed {size_text(freed)}"
    assert total.endswith(f", {size_text(freed)} in all")  # printed before, freed after: the same
    assert kept <= {p.name for p in folder.iterdir()} and not {p.name for p in folder.iterdir()} & {"retired.sif", "retired.sif.json"}
    assert catalog.clean_plan(project).rows == []
    assert "tiny: up to date" in container_cli("build", "tiny", cwd=project)[0].stdout  # the image of images.yaml stays usable


def _allocated(folder: Path) -> int:
    """Disk space under ``folder``: what clean frees comes off it."""
    return sum(p.lstat().st_blocks * 512 for p in [folder, *folder.rglob("*")])


def _orchestrator() -> list[str]:
    import sys

    return [sys.executable, "-m", "orchestrator"]
