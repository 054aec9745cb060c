"""The rank environment on the local profile (docs/reference/ranks.md): `-G 2` starts two
processes, as srun starts a job's tasks, and the page's plain torch.distributed example (no
Lightning) finds the same variables there as on a cluster."""

from __future__ import annotations

from support import ddp_project, ddp_ranks, dvc, require_training


def test_plain_torch_distributed_on_two_local_processes(tmp_path):
    require_training()
    project = ddp_project(tmp_path / "p", "local", nodes=1, gpus=2)
    done = dvc(project, "repro")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = ddp_ranks(project)
    assert [(r["RANK"], r["LOCAL_RANK"], r["NODE_RANK"]) for r in ranks] == [("0", "0", "0"), ("1", "1", "0")], ranks
    assert {(r["WORLD_SIZE"], r["LOCAL_WORLD_SIZE"], r["MASTER_ADDR"], r["backend"]) for r in ranks} == {("2", "2", "127.0.0.1", "gloo")}
    assert len({r["MASTER_PORT"] for r in ranks}) == 1
    assert all(r["sum"] == r["expected"] == 3 for r in ranks), ranks
