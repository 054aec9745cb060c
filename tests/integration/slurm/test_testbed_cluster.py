"""The real Slurm testbed (marked slurm): batch jobs accounted, accounts enforced, CPU masks and
GPUs on both nodes, `testbed up` again quick, `testbed status` all up."""

from __future__ import annotations

import re
import subprocess
import time

import pytest
from support import invoke

from orchestrator.testbed import procs
from orchestrator.testbed.settings import LocalSlurmSettings

ACCOUNT = LocalSlurmSettings().account


def run(*argv, check=True):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=check)


@pytest.mark.slurm
def test_batch_job_runs_and_is_accounted(slurm_testbed, tmp_path):
    out = tmp_path / "job.out"
    submitted = run(
        "sbatch", f"--account={ACCOUNT}", "--wait", "--parsable", f"--output={out}", "--wrap", "echo hello from $SLURMD_NODENAME"
    )
    job = submitted.stdout.strip().split(";")[0]
    assert re.search(r"hello from node[12]", out.read_text())
    # slurmctld hands the record to slurmdbd asynchronously: allow a few seconds.
    deadline, record = time.monotonic() + 30, ""
    while time.monotonic() < deadline:
        record = run("sacct", "-j", job, "-X", "-n", "-P", "-o", "JobID,Account,State").stdout.strip()
        if record.endswith("COMPLETED"):
            break
        time.sleep(0.5)
    assert record == f"{job}|{ACCOUNT}|COMPLETED"


@pytest.mark.slurm
def test_unknown_account_is_refused(slurm_testbed):
    refused = run("sbatch", "--account=nope", "--wrap", "true", check=False)
    assert refused.returncode != 0
    assert "Invalid account" in refused.stderr


@pytest.mark.slurm
def test_cpu_masks_apply_on_both_nodes(slurm_testbed):
    script = 'echo "$SLURMD_NODENAME $SLURM_LOCALID $(grep Cpus_allowed_list /proc/self/status)"'
    out = run("srun", f"--account={ACCOUNT}", "-N2", "--ntasks-per-node=2", "--cpu-bind=mask_cpu:0x1,0x2", "sh", "-c", script).stdout
    seen = sorted(tuple(line.split()[:2] + line.split()[-1:]) for line in out.splitlines())
    assert seen == [("node1", "0", "0"), ("node1", "1", "1"), ("node2", "0", "0"), ("node2", "1", "1")]


@pytest.mark.slurm
def test_each_node_has_four_gpus(slurm_testbed):
    out = run("srun", f"--account={ACCOUNT}", "-N2", "--gres=gpu:4", "sh", "-c", 'echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"').stdout
    assert sorted(out.splitlines()) == ["node1 0,1,2,3", "node2 0,1,2,3"]


@pytest.mark.slurm
def test_up_again_is_quick(slurm_testbed):
    """`up` on a running testbed restarts nothing (the daemons keep their processes) and takes
    seconds: 2-3 alone on 2 cores; the bound leaves room for a suite loading the machine."""
    before = _daemons(slurm_testbed)
    assert all(len(pids) == 1 for pids in before.values()), before
    start = time.monotonic()
    result = invoke("testbed", "up")
    elapsed = time.monotonic() - start
    assert result.exit_code == 0, result.output
    assert _daemons(slurm_testbed) == before, "`testbed up` on a running testbed restarted a daemon"
    assert elapsed < 30, f"`testbed up` on a running testbed took {elapsed:.1f} s"


def _daemons(settings) -> dict[str, list[int]]:
    """The process ids of slurmdbd, slurmctld and each node's slurmd."""
    table = procs.processes()
    return {name: procs.pids_of(name, table) for name in ("slurmdbd", "slurmctld", *(f"slurmd:{node}" for node in settings.nodes))}


@pytest.mark.slurm
def test_status_says_all_up(slurm_testbed):
    result = invoke("testbed", "status")
    assert result.exit_code == 0, result.output
    assert [line.split()[:2] for line in result.output.splitlines()] == [[name, "up"] for name in slurm_testbed.components]
