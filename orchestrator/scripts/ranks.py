"""Each task's place in its job, under the names every framework reads: torch.distributed's
``env://`` (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), torchrun's LOCAL_RANK and
LOCAL_WORLD_SIZE, and NODE_RANK (Lightning, Accelerate, DeepSpeed).

On Slurm they are Slurm's own per-task variables under those names, read by the task
itself (srun sets SLURM_PROCID and the others in each task), outside the container, where
``scontrol`` is. Without Slurm, the local script starts one process per device and gives
each its rank (``orch_rank``) and the job's port (``orch_port``).

Lightning keeps choosing its SLURMEnvironment with these set: its TorchElasticEnvironment
needs TORCHELASTIC_RUN_ID (older Lightning: GROUP_RANK with RANK, LOCAL_RANK and
LOCAL_WORLD_SIZE), which nothing here sets and the script clears (:data:`LEAKED_LAUNCHER_VARS`).
"""

from __future__ import annotations

from orchestrator.config.profile_schema import RANK_VARIABLES
from orchestrator.scripts.quoting import Shell, quote

NAMES = RANK_VARIABLES  # in the order each task sets them

# Left by a launcher the job was submitted from (a shell inside a torchrun job: sbatch passes the
# environment on), they would make Lightning pick TorchElasticEnvironment over its SLURMEnvironment.
LEAKED_LAUNCHER_VARS = ("TORCHELASTIC_RUN_ID", "GROUP_RANK")

# Lightning's own rule (SLURMEnvironment.main_port: 15000 + the job id's last 4 digits): a
# training that sets up its own process group and one left to Lightning meet on the same port,
# and two jobs sharing a node get different ones unless their ids differ by a multiple of 10,000.
_SLURM_PORT = Shell('"$((15000 + SLURM_JOB_ID % 10000))"')


def slurm(master_addr_suffix: str) -> tuple[tuple[str, Shell], ...]:
    """A Slurm task's, from the variables srun sets in it. ``master_addr_suffix``: the profile's
    (JUWELS: rank 0's node name plus ``i`` is its InfiniBand address)."""
    return (
        ("RANK", Shell('"$SLURM_PROCID"')),
        ("LOCAL_RANK", Shell('"$SLURM_LOCALID"')),
        ("WORLD_SIZE", Shell('"$SLURM_NTASKS"')),
        # The jobs ask --ntasks-per-node, so srun sets SLURM_NTASKS_PER_NODE; SLURM_TASKS_PER_NODE
        # ("4(x2)") in case a step does without: every node of these jobs runs the same count.
        ("LOCAL_WORLD_SIZE", Shell('"${SLURM_NTASKS_PER_NODE:-${SLURM_TASKS_PER_NODE%%[(,]*}}"')),
        ("NODE_RANK", Shell('"$SLURM_NODEID"')),
        ("MASTER_ADDR", Shell('"$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"' + master_addr_suffix)),
        ("MASTER_PORT", _SLURM_PORT),
    )


def local(processes: int) -> tuple[tuple[str, Shell], ...]:
    """A process of the local script's, ``processes`` of them on this machine."""
    return (
        ("RANK", Shell('"$orch_rank"')),
        ("LOCAL_RANK", Shell('"$orch_rank"')),
        ("WORLD_SIZE", quote(processes)),
        ("LOCAL_WORLD_SIZE", quote(processes)),
        ("NODE_RANK", quote(0)),
        ("MASTER_ADDR", quote("127.0.0.1")),
        ("MASTER_PORT", Shell('"$orch_port"')),
    )
