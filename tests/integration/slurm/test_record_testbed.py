"""`orchestrator record` on the real testbed: the items of a detached submission recorded in
one process, into the same dvc.lock that `dvc repro` writes for the same outputs."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
import yaml
from support import ACCOUNT, dvc, jobs_of, run_orchestrator
from test_slurm_testbed import probe_project
from test_stuck_testbed import _profile_with

pytestmark = pytest.mark.slurm

LAYOUTS = [(1, 1), (1, 2), (2, 1), (2, 2)]
# sacct's states of a job that has ended ("CANCELLED by 0": by whom, after the word).
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL")


def _ended(project, since, count, timeout=900):
    # Under the whole suite the testbed's two nodes are shared with every other Slurm test, so
    # these jobs may wait in the queue for minutes before they run.
    deadline = time.time() + timeout
    while True:
        jobs = jobs_of(ACCOUNT, since, project, expect=count)
        if (len(jobs) >= count and all(state.split()[0] in ENDED for _, _, state, _ in jobs)) or time.time() > deadline:
            return jobs
        time.sleep(2)


def summary(stdout: str) -> tuple[int, ...]:
    """(recorded, up to date, not finished, failed) from `record`'s last line."""
    return tuple(int(part.split()[0]) for part in stdout.strip().splitlines()[-1].split(", "))


def test_record_writes_the_lock_dvc_repro_writes_with_one_project_load(slurm_testbed, tmp_path):
    project = probe_project(tmp_path / "p", LAYOUTS)
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["orchestrator"]["cluster"] = str(_profile_with(tmp_path, service_partition=None))  # no recording job: this test records
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    since = time.time()
    submitted = run_orchestrator("submit", cwd=project)
    assert submitted.returncode == 0, submitted.stderr
    # While they are queued or running: what has finished is recorded, the rest left as it is.
    early = run_orchestrator("record", cwd=project)
    assert early.returncode == 0, early.stdout + early.stderr
    recorded, up_to_date, unfinished, failed = summary(early.stdout)
    assert recorded + unfinished == len(LAYOUTS) and (up_to_date, failed) == (0, 0), early.stdout
    jobs = _ended(project, since, len(LAYOUTS))
    assert [state for *_, state, _ in jobs] == ["COMPLETED"] * len(LAYOUTS), jobs

    done = run_orchestrator("record", cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert summary(done.stdout) == (len(LAYOUTS) - recorded, recorded, 0, 0), done.stdout
    assert dvc(project, "status").stdout.strip() == "Data and pipelines are up to date."
    recorded = yaml.safe_load((project / "dvc.lock").read_text())

    # The same outputs recorded by `dvc repro` (it attaches to the finished jobs): the same lock.
    (project / "dvc.lock").unlink()
    repro = dvc(project, "repro")
    assert repro.returncode == 0, repro.stdout + repro.stderr
    assert yaml.safe_load((project / "dvc.lock").read_text()) == recorded
    assert len(jobs_of(ACCOUNT, since, project)) == len(LAYOUTS)  # nothing submitted again
    assert summary(run_orchestrator("record", cwd=project).stdout) == (0, len(LAYOUTS), 0, 0)


def test_the_recording_job_succeeds_and_says_so_when_an_item_was_cancelled(slurm_testbed, tmp_path):
    """Issue 53: one item cancelled, its `dvc repro` failed the recording job (sacct: FAILED
    127:0, DVC's exit 255) although it had recorded the others. Now it ends COMPLETED, its log
    naming what it recorded and what not, and the others are in dvc.lock."""
    layouts = [(1, 1), (1, 2), (2, 1)]
    project = probe_project(tmp_path / "p", layouts)  # the testbed profile: a service partition, so a recording job
    since = time.time()
    env = {**os.environ, "PROBE_SLEEP": "5"}  # still queued or running when it is cancelled
    submitted = run_orchestrator("submit", cwd=project, env=env)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    rows = {
        line.split()[0]: line.split()[1] for line in submitted.stdout.splitlines() if line.startswith(("probe@", "orchestrator:record"))
    }
    cancelled = run_orchestrator("cancel", "probe@layout1", cwd=project)
    assert cancelled.returncode == 0 and rows["probe@layout1"] in cancelled.stdout, cancelled.stdout + cancelled.stderr

    jobs = {job: (name, state) for job, name, state, _ in _ended(project, since, len(layouts) + 1)}
    recorder = rows["orchestrator:record"]
    assert jobs[recorder] == ("orchestrator-record", "COMPLETED"), jobs
    assert jobs[rows["probe@layout1"]][1].startswith("CANCELLED") and {jobs[rows[f"probe@layout{i}"]][1] for i in (0, 2)} == {
        "COMPLETED"
    }, jobs
    exit_code = subprocess.run(["sacct", "-X", "-n", "-P", "-j", recorder, "--format=ExitCode"], capture_output=True, text=True)
    assert exit_code.stdout.strip() == "0:0", exit_code.stdout

    log = (project / f".orchestrator/logs/record-{recorder}.log").read_text()
    expected = f"recording job: 2 recorded, not recorded: probe@layout1 (job {rows['probe@layout1']} cancelled; log "
    assert expected in log, log
    assert set(yaml.safe_load((project / "dvc.lock").read_text())["stages"]) == {"probe@layout0", "probe@layout2"}
    changed = dvc(project, "status", "--json")
    assert list(json.loads(changed.stdout)) == ["probe@layout1"], changed.stdout + changed.stderr
    status = run_orchestrator("status", cwd=project)
    (line,) = [row for row in status.stdout.splitlines() if row.startswith("orchestrator:record")]
    assert "completed" in line and "failed" not in line, status.stdout
