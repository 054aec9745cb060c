"""orchestrator.jobs.executor: submitit executors from the same plan as `orchestrator render`.
A function run on the real testbed: tests/integration/slurm/test_executor_on_slurm.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
import submitit
from support import ACCOUNT, executor_project

from orchestrator.errors import PlanError
from orchestrator.jobs.executor import executor

# LUMI's documented masks for 8 tasks per node, GCD 0..7 (LUMI user guide, GPU binding).
LUMI_MASKS = "mask_cpu:0xfe000000000000,0xfe00000000000000,0xfe0000,0xfe000000,0xfe,0xfe00,0xfe00000000,0xfe0000000000"


@pytest.fixture
def no_slurm_needed(monkeypatch):
    """SlurmExecutor refuses to exist without srun; these tests only read its parameters."""
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 2))


def test_lumi_executor_carries_the_plan(tmp_path, no_slurm_needed):
    ex = executor(tmp_path / "submitit", cluster="lumi", project=executor_project(tmp_path / "p"), nodes=2, gpus_per_node=8)
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
    assert container[1] == '    --bind "/var/spool/slurmd" \\'
    assert f"    --bind {tmp_path}/submitit \\" in container  # the pickles must be visible inside
    assert '    "/project/${SLURM_JOB_ACCOUNT}/containers/orchestrator.sif" \\' in container
    assert container[-3:] == ['    python "$@"', "}", "export -f orch_task"]


def test_arguments_win_over_params(tmp_path, no_slurm_needed):
    ex = executor(
        tmp_path / "s",
        cluster="lumi",
        project=executor_project(tmp_path / "p"),
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
