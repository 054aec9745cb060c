"""A site's MaxSubmitJobs on the real testbed: a 200-item sweep that would not fit is refused
before anything is queued, naming the limit (tests/unit/jobs/test_detached.py: within it, the
submission goes ahead)."""

from __future__ import annotations

import getpass
import subprocess
import time

import pytest
import yaml
from support import ACCOUNT, jobs_of, run_orchestrator
from test_slurm_testbed import probe_project

pytestmark = pytest.mark.slurm


def _max_submit(value: int) -> None:
    user = getpass.getuser()
    subprocess.run(["sacctmgr", "-i", "modify", "user", user, "set", f"maxsubmitjobs={value}"], check=True, capture_output=True)


def test_a_sweep_over_maxsubmitjobs_is_refused_up_front(slurm_testbed, tmp_path):
    project = probe_project(tmp_path / "p", [(1, 1)])
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["layouts"] = [{"nodes": 1, "tasks": 1, "i": i} for i in range(200)]
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    pipeline = (project / "dvc.yaml").read_text().replace("${item.layout.nodes}x${item.layout.tasks}", "${item.layout.i}")
    (project / "dvc.yaml").write_text(pipeline)
    since = time.time()
    _max_submit(50)
    try:
        done = run_orchestrator("submit", cwd=project)
    finally:
        _max_submit(-1)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "200 item(s) and the recording job would need 201 jobs, but the association of" in done.stderr
    assert "allows 50 queued or running (MaxSubmitJobs)" in done.stderr and "nothing was submitted" in done.stderr
    assert jobs_of(ACCOUNT, since, project) == []
    assert not (project / ".orchestrator/ledger").exists() or not any((project / ".orchestrator/ledger").glob("probe@*.json"))
