"""The Slurm options of a plan: the allocation's directives and the job step's srun arguments."""

from __future__ import annotations

from orchestrator.config import binding
from orchestrator.config.profile_schema import Partition, Profile
from orchestrator.pipeline.runargs import JobSpec
from orchestrator.scripts.interned import shared
from orchestrator.slurm import requests
from orchestrator.slurm.requests import Requests

NO_REQUESTS = Requests()


def scheduler_args(
    name: str,
    account: str | None,
    partition_name: str | None,
    partition: Partition | None,
    time: str,
    job: JobSpec,
    p: Profile,
    layout: tuple[int, int, int],
    form: str,
    log: str,
    asked: Requests = NO_REQUESTS,
) -> tuple[str, ...]:
    """The job's ``#SBATCH`` directives; ``layout``: (tasks, GPUs, CPUs per task) per node;
    ``asked``: the stage's and the project's requests (they replace the partition's memory,
    QOS and constraint: a conflict is a plan problem, :func:`request_problems`)."""
    tasks, gpus, cpus_per_task = layout
    args = [f"--job-name={name}"]
    if account:
        args.append(f"--account={account}")
    if partition_name:
        args.append(f"--partition={partition.slurm_partition or partition_name if partition else partition_name}")
    if qos := asked.qos or (partition.qos if partition else None):
        args.append(f"--qos={qos}")
    if constraint := _constraint(asked.constraint, partition.constraint if partition else None):
        args.append(f"--constraint={constraint}")
    if asked.reservation:
        args.append(f"--reservation={asked.reservation}")
    args += [f"--time={time}", f"--nodes={job.nodes}", f"--ntasks-per-node={tasks}"]
    if gpus:
        args.append(f"--gpus-per-node={gpus}")
    if cpus_per_task:
        args.append(f"--cpus-per-task={cpus_per_task}")
    # The partition's memory request (the profile cites the site's page for it): per GPU only for a
    # job that asks for GPUs; a CPU job on such a partition keeps the site's per-CPU default. A
    # memory request of the stage's or the project's replaces it: Slurm takes one of the three.
    if (memory := asked.memory) is not None:
        args.append(f"--{memory[0]}={memory[1]}")
    elif partition and partition.mem_per_gpu and gpus:
        args.append(f"--mem-per-gpu={partition.mem_per_gpu}")
    elif partition and partition.mem:
        args.append(f"--mem={partition.mem}")
    if partition and partition.whole_node:
        args.append("--exclusive")
    if p.scheduler.requeue_signal:
        args.append(f"--signal={p.scheduler.requeue_signal}")
        if form == "sbatch":
            args.append("--requeue")
    # The user's own options after the site's, an option both give as the user gives it.
    mine = {_name(o) for o in asked.sbatch_options}
    args += [o for o in p.scheduler.extra_options if _name(o) not in mine]
    args += asked.sbatch_options
    args += ["--open-mode=append", f"--output={log}"]
    return (args[0], *map(shared, args[1:-1]), args[-1])  # all but the first and last are the layout's


def request_problems(asked: Requests, partition_name: str | None, partition: Partition | None, gpus: int, p: Profile) -> list[str]:
    """Where the requests contradict the partition, or ask what no node has."""
    found = []
    if partition and partition.qos and asked.qos and asked.qos != partition.qos:
        found.append(
            f"QOS {asked.qos} (--qos, or params' orchestrator.qos) contradicts partition {partition_name}, which is "
            f"{p.name}'s QOS {partition.qos}: leave the QOS out, or name another partition"
        )
    own = partition.constraint if partition else None
    if own and asked.constraint and asked.constraint != own and not (_joinable(asked.constraint) and _joinable(own)):
        found.append(
            f"constraint {asked.constraint} (--constraint, or params' orchestrator.constraint) cannot be joined to partition "
            f"{partition_name}'s own ({own}) with & (Slurm has no parentheses): give features joined by & only"
        )
    memory = asked.memory
    if memory and memory[0] == "mem-per-gpu" and not gpus:
        found.append("--mem-per-gpu on a job without GPUs (a CPU job, or a profile without GPUs): give --mem or --mem-per-cpu")
    node_gb = p.node.memory_gb if not (partition and partition.cpus_per_node) else None  # another node type's is not stated
    if memory and node_gb and memory[0] != "mem-per-cpu" and requests.MEMORY.fullmatch(memory[1]):
        per_node = requests.memory_gb(memory[1]) * (gpus if memory[0] == "mem-per-gpu" else 1)
        if per_node > node_gb:
            found.append(f"--{memory[0]}={memory[1]} asks {per_node:g} GiB per node, more than a {p.name} node's {node_gb:g} GB")
    return found


def _constraint(asked: str | None, partition: str | None) -> str | None:
    """One expression: the partition's features and the job's, both required."""
    if asked and partition and asked != partition and _joinable(asked) and _joinable(partition):
        return f"{partition}&{asked}"
    return asked or partition


def _joinable(expression: str) -> bool:
    return not any(c in expression for c in "|[")


def _name(option: str) -> str:
    return option.removeprefix("--").partition("=")[0]


def step_args(cpus: int | None, cpus_per_task: int, bound: binding.Binding | None, whole_node: bool) -> tuple[str, ...]:
    """The srun arguments of the job step (a Slurm profile's)."""
    step = ["--kill-on-bad-exit=1"]
    if cpus_per_task:
        step.append(f"--cpus-per-task={cpus_per_task}")
    if bound and whole_node:
        step.append(f"--cpu-bind={bound.srun_value}")
    elif bound or cpus is not None:
        # Masks only hold on whole-node allocations; a CPU job has no GPU to sit next to,
        # so its task gets whole cores wherever Slurm places it.
        step.append("--cpu-bind=cores")
    return tuple(step)
