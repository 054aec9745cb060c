"""Nothing stuck, on the real testbed: a deleted output is made again, a forced run gets
a new job, a held job is reported with what to do, and a damaged ledger of a running
item is recovered without a second job."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from support import ACCOUNT, ROOT, dvc, jobs_of, run_orchestrator
from test_slurm_testbed import probe_project

pytestmark = pytest.mark.slurm


def _ledger_job_ids(project: Path, item: str) -> list[str]:
    shown = run_orchestrator("show", item, cwd=project)
    assert shown.returncode == 0, shown.stderr
    return yaml.safe_load(shown.stdout)["job_ids"]


def test_a_deleted_output_is_made_again_by_a_new_job_and_force_makes_another(slurm_testbed, tmp_path):
    project = probe_project(tmp_path / "p", [(1, 1)])
    since = time.time()
    assert dvc(project, "repro").returncode == 0
    (first,) = _ledger_job_ids(project, "probe@layout0")
    shutil.rmtree(project / "out/1x1")  # a scratch purge
    done = dvc(project, "repro")
    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    assert f"job {first} succeeded, but its output out/1x1 is gone; submitting a new one" in text
    assert (project / "out/1x1/rank0.json").is_file()
    ids = _ledger_job_ids(project, "probe@layout0")
    assert ids[0] == first and len(ids) == 2  # the old job stays in the item's history
    # Up to date: a plain repro does nothing; `dvc repro -f` is recognised and submits a new job.
    assert "submitted job" not in "".join(dvc(project, "repro").stderr)
    forced = dvc(project, "repro", "-f")
    assert forced.returncode == 0 and "a new job was asked for (forced)" in forced.stderr, forced.stderr
    assert len(_ledger_job_ids(project, "probe@layout0")) == 3
    assert len(jobs_of(ACCOUNT, since, project, expect=3)) == 3


def _profile_with(tmp_path: Path, **scheduler) -> Path:
    data = yaml.safe_load((ROOT / "orchestrator/config/profiles/testbed.yaml").read_text())
    data["scheduler"].update(scheduler)
    path = tmp_path / "testbed-quick.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.testbed_exclusive  # both nodes blocked
def test_a_held_job_is_reported_with_its_reason_and_run_gives_up_then_follows_it_once_released(slurm_testbed, tmp_path):
    project = probe_project(tmp_path / "p", [(1, 1)])
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["orchestrator"]["cluster"] = str(_profile_with(tmp_path, stuck_timeout_s=6, service_partition=None))
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    since = time.time()
    # Both nodes busy, so the item's job waits; then it is held (by root: an admin hold), as slurmctld holds a failed launch.
    blocker = subprocess.run(
        ["sbatch", "--parsable", "-N2", "--exclusive", "-A", ACCOUNT, "-p", "debug", "-t", "5", "-o", "/dev/null", "--wrap", "sleep 300"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        submitted = run_orchestrator("submit", cwd=project)
        assert submitted.returncode == 0, submitted.stderr
        (job,) = [line.split()[1] for line in submitted.stdout.splitlines() if line.startswith("probe@layout0")]
        subprocess.run(["scontrol", "hold", job], check=True)
        status = run_orchestrator("status", cwd=project)
        assert status.returncode == 0 and "JobHeldAdmin" in status.stdout, status.stdout + status.stderr
        assert f"will not start by itself (JobHeldAdmin): the job is held: `scontrol release {job}`" in status.stderr
        started = time.time()
        done = dvc(project, "repro", timeout=120)
        text = done.stdout + done.stderr
        assert done.returncode != 0 and f"job {job} will not start by itself (JobHeldAdmin)" in text, text
        assert "stopped waiting (scheduler.stuck_timeout_s in the profile)" in text and time.time() - started < 90
        subprocess.run(["scontrol", "release", job], check=True)
    finally:
        subprocess.run(["scancel", blocker], check=False)
    done = dvc(project, "repro", timeout=240)
    assert done.returncode == 0 and f"attached to job {job}" in done.stderr, done.stdout + done.stderr
    assert [row[1] for row in jobs_of(ACCOUNT, since, project, expect=1)] == ["probe@layout0"]  # never a second job


def test_a_damaged_ledger_of_a_running_item_is_recovered_without_a_second_job(slurm_testbed, tmp_path):
    project = probe_project(tmp_path / "p", [(1, 1)])
    since = time.time()
    env = {**os.environ, "ORCH_POLL_MAX_S": "2", "PROBE_SLEEP": "15"}
    first = subprocess.Popen(
        ["dvc", "repro"], cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    path = project / ".orchestrator/ledger/probe@layout0.json"
    deadline = time.time() + 60
    while time.time() < deadline and '"job_id"' not in (path.read_text() if path.exists() else ""):
        time.sleep(0.5)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    path.write_text(path.read_text()[:30])  # cut short, as by a full disk or a crash of the file system
    done = dvc(project, "repro", env={"PROBE_SLEEP": "15"}, timeout=240)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    assert f"ledger file {path} is damaged" in text and "found job" in text
    assert list(path.parent.glob("probe@layout0.json.damaged-*"))
    assert [row[1] for row in jobs_of(ACCOUNT, since, project, expect=1)] == ["probe@layout0"]
    status = run_orchestrator("status", cwd=project)
    assert "recovered (it is not valid JSON" in status.stdout, status.stdout
