"""`orchestrator record` on the real testbed: the items of a detached submission recorded in
one process, into the same dvc.lock that `dvc repro` writes for the same outputs."""

from __future__ import annotations

import time

import pytest
import yaml
from support import ACCOUNT, dvc, jobs_of, run_orchestrator
from test_slurm_testbed import probe_project
from test_stuck_testbed import _profile_with

pytestmark = pytest.mark.slurm

LAYOUTS = [(1, 1), (1, 2), (2, 1), (2, 2)]


def _ended(project, since, count, timeout=900):
    # Under the whole suite the testbed's two nodes are shared with every other Slurm test, so
    # these jobs may wait in the queue for minutes before they run.
    deadline = time.time() + timeout
    while True:
        jobs = jobs_of(ACCOUNT, since, project, expect=count)
        if (len(jobs) >= count and all(state in ("COMPLETED", "FAILED", "CANCELLED") for _, _, state, _ in jobs)) or time.time() > deadline:
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
