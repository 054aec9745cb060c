"""A submitit executor (orchestrator/jobs/executor.py) running a function on the real testbed:
both nodes, the rendered CPU masks, the profile's environment, leaked container binds cleared."""

from __future__ import annotations

import time

import pytest
from support import executor_project

from orchestrator.jobs.executor import executor


@pytest.mark.slurm
def test_testbed_function_runs_on_both_nodes_with_masks(slurm_testbed, tmp_path, monkeypatch):
    monkeypatch.setenv("APPTAINER_BIND", "/leaked")  # as a python inside a SIF would have it
    ex = executor(tmp_path / "submitit", cluster="testbed", project=executor_project(tmp_path / "p"), nodes=2, gpus_per_node=2)

    def where() -> dict:  # nested: cloudpickle sends it by value, the task needs no tests/ on its path
        import os

        import submitit

        env = submitit.JobEnvironment()
        return {
            "global_rank": env.global_rank,
            "local_rank": env.local_rank,
            "node": env.node,
            "nodename": os.environ["SLURMD_NODENAME"],
            "cpus": sorted(os.sched_getaffinity(0)),
            "profile": os.environ.get("ORCH_PROFILE"),
            "leaked": os.environ.get("APPTAINER_BIND"),
        }

    job = ex.submit(where)
    deadline = time.monotonic() + 120
    while not job.done():
        if time.monotonic() > deadline:
            job.cancel()
            pytest.fail(f"job {job.job_id} not done after 120 s (state {job.state}); stderr:\n{job.stderr()}")
        time.sleep(1)
    results = sorted(job.results(), key=lambda r: r["global_rank"])
    print(*results, sep="\n")

    assert [r["global_rank"] for r in results] == [0, 1, 2, 3]
    assert {r["nodename"] for r in results} == {"node1", "node2"}
    assert [(r["node"], r["local_rank"]) for r in results] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(r["cpus"] == [r["local_rank"]] for r in results)  # masks 0x1, 0x2 applied
    assert all(r["profile"] == "testbed" and r["leaked"] is None for r in results)
