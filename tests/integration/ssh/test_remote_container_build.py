"""`container build tiny --on-cluster` from a workstation clone: the project sent to the loopback
"login node" as `submit --remote` sends it, the image built there in a job of the real Slurm
testbed (apptainer build --fakeroot) into the profile's container.image path, the digest file
read back; a second call submits nothing and leaves the digest file alone; a local build of the
same inputs writes the same digest line; a profile without container.build is refused before
anything is sent. The tiny scratch image (support.make_tiny) builds in a second, not the CI
image's minutes. The `login` fixture: conftest.py beside this."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import yaml
from support import ACCOUNT, jobs_of, make_tiny

pytestmark = [pytest.mark.ssh, pytest.mark.slurm, pytest.mark.apptainer]

GIT_ID = ["git", "-c", "user.name=Test", "-c", "user.email=test@example.com"]


def _project(login, tmp_path: Path, build: dict | None) -> tuple[Path, Path]:
    """A workstation clone with image ``tiny`` (params' orchestrator.image), and the profile's
    container section: its image under tmp_path (``${USER}`` in the path), ``build`` as given."""
    image = tmp_path / "shared" / "${USER}" / "tiny.sif"
    profile = yaml.safe_load(login.profile.read_text())
    profile["container"] = {"runtime": "apptainer", "image": str(image), **({"build": build} if build else {})}
    login.profile.write_text(yaml.safe_dump(profile, sort_keys=False))
    project = login.workstation(tmp_path / "ws" / "proj", items=1, params={"image": "tiny"})
    make_tiny(project)
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run([*GIT_ID, "commit", "-q", "-m", "the image"], cwd=project, check=True)
    user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    return project, Path(str(image).replace("${USER}", user))


def test_on_cluster_build_from_a_workstation_runs_a_job_once_and_brings_the_digest_back(slurm_testbed, apptainer, login, tmp_path):
    build = {"partition": "debug", "builder": "fakeroot", "cpus": 1, "time": "00:10:00"}
    project, image = _project(login, tmp_path, build)
    remote = login.cluster_root / "proj"
    digest = project / "containers" / "tiny.digest"
    since = time.time()

    first = login.orchestrator("container", "build", "tiny", "--on-cluster", "--remote", cwd=project, timeout=600)
    said = first.stdout + first.stderr
    assert first.returncode == 0, said
    assert "tiny: built in Slurm job" in said and "building (no image yet) with apptainer build --fakeroot" in said
    jobs = jobs_of(ACCOUNT, since, remote, expect=1)
    assert [(j[1], j[2]) for j in jobs] == [("orchestrator-build-tiny", "COMPLETED")], jobs
    assert image.is_file() and image.with_name("tiny.sif.json").is_file()  # at the profile's path, its stamp beside it
    line = digest.read_text()
    assert line.startswith("content-sha256:") and line == (remote / ".orchestrator/images/tiny.on-cluster.digest").read_text()
    assert (image.parent / ".tiny.sif.build-job").read_text().strip() == jobs[0][0]
    status = subprocess.run(["git", "status", "--porcelain"], cwd=remote, capture_output=True, text=True, check=True).stdout
    assert status == "", status  # the cluster's checkout stays clean
    written = digest.stat().st_mtime_ns

    again = login.orchestrator("container", "build", "tiny", "--on-cluster", "--remote", cwd=project, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "tiny: up to date" in again.stdout and "(unchanged)" in again.stdout
    time.sleep(2)
    assert len(jobs_of(ACCOUNT, since, remote)) == 1  # no second job
    assert digest.stat().st_mtime_ns == written and digest.read_text() == line

    # This machine is a login node of the testbed too: without --remote the build is planned here, no ssh.
    here = login.orchestrator("container", "build", "tiny", "--on-cluster", cwd=project, timeout=300)
    assert here.returncode == 0, here.stdout + here.stderr
    assert f"tiny: up to date ({image}, {line.strip()})" in here.stdout and "running `orchestrator" not in here.stderr
    assert jobs_of(ACCOUNT, since, project) == [] and len(jobs_of(ACCOUNT, since, remote)) == 1
    assert digest.stat().st_mtime_ns == written

    local_digest = tmp_path / "local.digest"
    local = login.orchestrator(
        "container", "build", "tiny", "-o", str(tmp_path / "elsewhere" / "tiny.sif"), "--digest-file", str(local_digest),
        cwd=project, timeout=300,
    )  # fmt: skip
    assert local.returncode == 0, local.stdout + local.stderr
    assert local_digest.read_text() == line  # the same inputs, the same identity, wherever built


def test_a_profile_without_a_build_section_is_refused_before_anything_is_sent(login, tmp_path):
    project, image = _project(login, tmp_path, None)
    done = login.orchestrator("container", "build", "tiny", "--on-cluster", "--remote", cwd=project, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "has no container.build section" in done.stderr and "Traceback" not in done.stderr
    assert not login.cluster_root.exists() and not image.exists()  # nothing synced, nothing built
