"""The rank environment on Slurm (docs/reference/ranks.md): the page's plain torch.distributed
example, no Lightning, 2 nodes x 2 tasks on the testbed, gloo: every task finds its place from
RANK, LOCAL_RANK, WORLD_SIZE, NODE_RANK, MASTER_ADDR and MASTER_PORT, as Slurm placed it."""

from __future__ import annotations

import pytest
from support import ddp_project, ddp_ranks, dvc, require_training


@pytest.mark.slurm
def test_plain_torch_distributed_over_two_nodes(slurm_testbed, tmp_path):
    require_training()
    project = ddp_project(tmp_path / "p", "testbed", nodes=2, gpus=2)
    done = dvc(project, "repro")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = ddp_ranks(project)
    assert [r["RANK"] for r in ranks] == ["0", "1", "2", "3"], ranks
    assert {(r["WORLD_SIZE"], r["LOCAL_WORLD_SIZE"], r["backend"]) for r in ranks} == {("4", "2", "gloo")}
    # Slurm's block distribution: ranks 0 and 1 on the first node, 2 and 3 on the second.
    assert [(r["NODE_RANK"], r["LOCAL_RANK"]) for r in ranks] == [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")]
    assert all(r["sum"] == r["expected"] == 10 for r in ranks), ranks
    # Rank 0's node, and Lightning's port for the job (15000 + its id's last 4 digits).
    job_id = int(next((project / ".orchestrator/logs").glob("ddp-*.log")).stem.rsplit("-", 1)[1])
    assert {(r["MASTER_ADDR"], r["MASTER_PORT"]) for r in ranks} == {("node1", str(15000 + job_id % 10000))}
