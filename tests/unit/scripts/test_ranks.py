"""The rank environment (orchestrator/scripts/ranks.py, docs/reference/ranks.md): every task of
every profile gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR and
MASTER_PORT; the local script starts one process per device, as srun starts a job's tasks."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from support import ROOT

from orchestrator.config import params, profile
from orchestrator.errors import ProfileError
from orchestrator.pipeline.runargs import JobSpec
from orchestrator.scripts import ranks, render
from orchestrator.scripts.plan import make_plan


def plan_for(name: str, command: tuple[str, ...], nodes: int = 1, gpus: int = 2, workspace: str = "/work/project"):
    spec = JobSpec(command=command, nodes=nodes, gpus_per_node=gpus)
    return make_plan(spec, "item", "", profile.load(name), params.Settings(account="project_465000858"), workspace)


@pytest.mark.parametrize("name", profile.builtin_names())
def test_every_task_of_every_profile_gets_the_rank_variables(name):
    text = render.render(plan_for(name, ("python", "train.py")))
    assert f"  export {' '.join(ranks.NAMES)}\n" in text
    for variable in ranks.NAMES:
        assert f"  {variable}=" in text
    # Cleared first: set by a torchrun the job was submitted from, they would make Lightning pick TorchElastic.
    assert all(f" {leaked}" in text.split("\nunset ", 1)[1].split("\n", 1)[0] for leaked in ranks.LEAKED_LAUNCHER_VARS)


def test_slurm_tasks_take_theirs_from_slurm_and_juwels_its_infiniband_address():
    text = render.render(plan_for("juwels-booster", ("python", "train.py"), nodes=2, gpus=4))
    assert '  RANK="$SLURM_PROCID"\n  LOCAL_RANK="$SLURM_LOCALID"\n  WORLD_SIZE="$SLURM_NTASKS"\n' in text
    assert '  MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"i\n' in text
    assert '  MASTER_PORT="$((15000 + SLURM_JOB_ID % 10000))"\n' in text
    # Set in the task before the container starts: scontrol is outside it, and apptainer passes the environment in.
    assert text.index("MASTER_ADDR=") < text.index("exec apptainer exec")


def test_the_slurm_block_computes_what_lightning_would(tmp_path):
    """The rendered assignments, run with a task's Slurm variables and a fake scontrol."""
    text = render.render(plan_for("testbed", ("true",), nodes=2, gpus=2))
    block = "\n".join(line for line in text.splitlines() if line.startswith(tuple(f"  {n}=" for n in ranks.NAMES)))
    (tmp_path / "scontrol").write_text("#!/bin/sh\nprintf 'nodeA\\nnodeB\\n'\n")
    (tmp_path / "scontrol").chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NTASKS": "4", "SLURM_NODEID": "1"}
    env |= {"SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_JOB_NODELIST": "node[A-B]", "SLURM_JOB_ID": "123456"}
    shown = "; ".join(f'echo "{n}=${n}"' for n in ranks.NAMES)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", f"{block}\n{shown}"], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == [
        "RANK=3", "LOCAL_RANK=1", "WORLD_SIZE=4", "LOCAL_WORLD_SIZE=2", "NODE_RANK=1", "MASTER_ADDR=nodeA", "MASTER_PORT=18456",
    ]  # fmt: skip


def run_local(tmp_path: Path, command: tuple[str, ...], gpus: int) -> subprocess.CompletedProcess:
    plan = plan_for("local", command, gpus=gpus, workspace=str(tmp_path))
    assert plan.problems == ()
    script = tmp_path / "job.sh"
    script.write_text(render.render(plan))
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60, check=False)


SHOW = 'echo "rank $RANK local $LOCAL_RANK of $WORLD_SIZE/$LOCAL_WORLD_SIZE node $NODE_RANK at $MASTER_ADDR:$MASTER_PORT"'


def test_the_local_script_starts_one_process_per_device_each_with_its_rank(tmp_path):
    done = run_local(tmp_path, ("bash", "-c", SHOW), gpus=2)
    assert done.returncode == 0, done.stderr
    lines = sorted(done.stdout.splitlines())
    assert [line.split(" at ")[0] for line in lines] == ["rank 0 local 0 of 2/2 node 0", "rank 1 local 1 of 2/2 node 0"]
    assert len({line.split(" at ")[1] for line in lines}) == 1 and lines[0].split(" at ")[1].startswith("127.0.0.1:")
    assert (tmp_path / ".orchestrator/logs/item-local.log").read_text().count("rank ") == 2


def test_the_first_local_process_to_fail_stops_the_others_and_its_status_is_the_jobs(tmp_path):
    # Rank 1 fails at once; rank 0 would otherwise wait in a collective far longer than the test.
    command = ("bash", "-c", 'if [ "$RANK" = 1 ]; then exit 3; fi; exec sleep 300')
    done = run_local(tmp_path, command, gpus=2)
    assert done.returncode == 3, done.stderr


def test_a_profile_may_not_set_a_rank_variable(tmp_path):
    data = yaml.safe_load((ROOT / "orchestrator/config/profiles/testbed.yaml").read_text())
    data["environment"]["variables"] |= {"MASTER_PORT": "29500", "RANK": "0"}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError) as err:
        profile.load(str(path))
    text = err.value.render()
    assert "environment.variables.MASTER_PORT: set by the orchestrator in every task" in text and "environment.variables.RANK" in text
