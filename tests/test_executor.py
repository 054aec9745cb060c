"""orchestrator.executor: submitit executors from the same plan as `orchestrator render`."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import submitit

from orchestrator.errors import PlanError
from orchestrator.jobs.executor import executor

ACCOUNT = "project_465000858"
# LUMI's documented masks for 8 tasks per node, GCD 0..7 (LUMI user guide, GPU binding).
LUMI_MASKS = "mask_cpu:0xfe000000000000,0xfe00000000000000,0xfe0000,0xfe000000,0xfe,0xfe00,0xfe00000000,0xfe0000000000"


def project(root: Path) -> Path:
    """All Workspace.open needs: a folder whose params.yaml names the account."""
    root.mkdir()
    (root / "params.yaml").write_text(f"orchestrator:\n  account: {ACCOUNT}\n")
    return root


@pytest.fixture
def no_slurm_needed(monkeypatch):
    """SlurmExecutor refuses to exist without srun; these tests only read its parameters."""
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 2))


def test_lumi_executor_carries_the_plan(tmp_path, no_slurm_needed):
    ex = executor(tmp_path / "submitit", cluster="lumi", project=project(tmp_path / "p"), nodes=2, gpus_per_node=8)
    p = ex.parameters
    assert (p["nodes"], p["ntasks_per_node"], p["gpus_per_node"], p["cpus_per_task"]) == (2, 8, 8, 7)
    assert (p["account"], p["partition"], p["time"]) == (ACCOUNT, "standard-g", 60)  # params.yaml, profile defaults
    assert p["exclusive"] is True and p["additional_parameters"] == {"requeue": True}
    assert p["signal_delay_s"] == 90
    assert p["srun_args"] == ["--kill-on-bad-exit=1", "--cpus-per-task=7", f"--cpu-bind={LUMI_MASKS}"]

    setup = p["setup"]
    assert any(line.startswith("unset APPTAINER_BIND ") and "SINGULARITY_BIND" in line for line in setup)
    assert '  mkdir -p -- "$MIOPEN_USER_DB_PATH"' in setup  # per node: inside the task function
    # submitit's python is the plan's task: environment, then singularity exec <flags> <image> python.
    assert ex.python == "bash -c 'orch_task \"$@\"' orch-task"
    container = setup[setup.index("  exec singularity exec \\") :]
    assert container[1] == "    --rocm \\"
    assert f"    --bind {tmp_path}/submitit \\" in container  # the pickles must be visible inside
    assert '    "/project/${SLURM_JOB_ACCOUNT}/containers/orchestrator.sif" \\' in container
    assert container[-3:] == ['    python "$@"', "}", "export -f orch_task"]


def test_arguments_win_over_params(tmp_path, no_slurm_needed):
    ex = executor(
        tmp_path / "s",
        cluster="lumi",
        project=project(tmp_path / "p"),
        time="00:30:30",
        partition="dev-g",
        account="project_465000001",
        container=False,
    )
    p = ex.parameters
    assert (p["account"], p["partition"], p["time"]) == ("project_465000001", "dev-g", 31)  # minutes, rounded up
    assert (p["nodes"], p["ntasks_per_node"], p["gpus_per_node"]) == (1, 1, 1)
    assert "exclusive" not in p and p["srun_args"][-1] == "--cpu-bind=cores"  # dev-g is shared: no masks
    assert not any("singularity" in line for line in p["setup"])
    assert f'  exec {sys.executable} "$@"' in p["setup"]


def test_bad_request_raises_plan_error_listing_every_problem(tmp_path, no_slurm_needed):
    (tmp_path / "p").mkdir()  # no params.yaml: no account either
    with pytest.raises(PlanError) as err:
        executor(tmp_path / "s", cluster="lumi", project=tmp_path / "p", nodes=2, gpus_per_node=16)
    problems = err.value.problems
    assert "asks for 16 GPUs per node, but lumi nodes have 8" in problems
    assert any(p.startswith("no account") for p in problems)


def test_importing_the_module_leaves_submitit_unloaded():
    code = "import sys, orchestrator.jobs.executor; assert 'submitit' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slurm
def test_testbed_function_runs_on_both_nodes_with_masks(slurm_testbed, tmp_path, monkeypatch):
    monkeypatch.setenv("APPTAINER_BIND", "/leaked")  # as a python inside a SIF would have it
    ex = executor(tmp_path / "submitit", cluster="testbed", project=project(tmp_path / "p"), nodes=2, gpus_per_node=2)

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
