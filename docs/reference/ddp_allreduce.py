"""Plain torch.distributed, no Lightning: each process joins the job's process group from the
environment the orchestrator sets, sums a number across all of them and writes what it saw.

Run as a stage: orchestrator run -N 2 --gpus-per-node 2 -- python ddp_allreduce.py out
"""

import json
import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist


def main(output: Path) -> None:
    local_rank = int(os.environ["LOCAL_RANK"])  # which of the node's devices is this process's
    if torch.cuda.is_available():  # NVIDIA or AMD: every device of the node is visible
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    # init_method env:// (the default) reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(total)  # the sum over every rank: 1 + 2 + ... + world
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")
    seen = {name: os.environ[name] for name in names}
    seen |= {"host": socket.gethostname(), "backend": backend, "sum": total.item(), "expected": world * (world + 1) / 2}
    output.mkdir(parents=True, exist_ok=True)
    (output / f"rank-{rank}.json").write_text(json.dumps(seen))
    print(f"rank {rank}/{world} on {seen['host']}: sum {seen['sum']:g}, expected {seen['expected']:g}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
