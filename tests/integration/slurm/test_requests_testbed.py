"""A stage's memory request and the project's own sbatch option reach Slurm as asked (read back
from the controller right after `submit`; the jobs are cancelled, their running is not the point)."""

from __future__ import annotations

import secrets
import subprocess
import time

import pytest
import yaml
from support import ACCOUNT, job_field, jobs_of, make_project, run_orchestrator


@pytest.mark.slurm
def test_a_stages_memory_and_a_passed_through_option_reach_slurm(slurm_testbed, tmp_path):
    tag = "orch-requests-" + secrets.token_hex(4)
    params = {"orchestrator": {"cluster": "testbed", "account": ACCOUNT, "sbatch_options": [f"--comment={tag}"]}}
    stages = {"probe": {"cmd": "orchestrator run --nodes 1 --gpus-per-node 1 --mem 300M --no-container -- python -c pass"}}
    project = make_project(tmp_path / "p", dvc_yaml=yaml.safe_dump({"stages": stages}), params_yaml=yaml.safe_dump(params))
    since = time.time()
    done = run_orchestrator("submit", cwd=project, timeout=300)
    mine = [row[0] for row in jobs_of(ACCOUNT, since, project, expect=1)]
    try:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        probe = next(j for j in mine if job_field(j, "JobName") == "probe")
        assert job_field(probe, "MinMemoryNode") == "300M"
        assert job_field(probe, "Comment") == tag
    finally:
        subprocess.run(["scancel", *mine], check=False)
