"""The Slurm options of a plan: the allocation's directives and the job step's srun arguments."""

from __future__ import annotations

from orchestrator.config import binding
from orchestrator.config.profile_schema import Partition, Profile
from orchestrator.pipeline.runargs import JobSpec
from orchestrator.scripts.interned import shared


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
) -> tuple[str, ...]:
    """The job's ``#SBATCH`` directives; ``layout``: (tasks, GPUs, CPUs per task) per node."""
    tasks, gpus, cpus_per_task = layout
    args = [f"--job-name={name}"]
    if account:
        args.append(f"--account={account}")
    if partition_name:
        args.append(f"--partition={partition.slurm_partition or partition_name if partition else partition_name}")
    if partition and partition.qos:
        args.append(f"--qos={partition.qos}")
    if partition and partition.constraint:
        args.append(f"--constraint={partition.constraint}")
    args += [f"--time={time}", f"--nodes={job.nodes}", f"--ntasks-per-node={tasks}"]
    if gpus:
        args.append(f"--gpus-per-node={gpus}")
    if cpus_per_task:
        args.append(f"--cpus-per-task={cpus_per_task}")
    # The partition's memory request (the profile cites the site's page for it): per GPU only for a
    # job that asks for GPUs; a CPU job on such a partition keeps the site's per-CPU default.
    if partition and partition.mem_per_gpu and gpus:
        args.append(f"--mem-per-gpu={partition.mem_per_gpu}")
    elif partition and partition.mem:
        args.append(f"--mem={partition.mem}")
    if partition and partition.whole_node:
        args.append("--exclusive")
    if p.scheduler.requeue_signal:
        args.append(f"--signal={p.scheduler.requeue_signal}")
        if form == "sbatch":
            args.append("--requeue")
    args += p.scheduler.extra_options
    args += ["--open-mode=append", f"--output={log}"]
    return (args[0], *map(shared, args[1:-1]), args[-1])  # all but the first and last are the layout's


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
