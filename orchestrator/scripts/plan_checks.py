"""What is wrong with a job for its cluster, or fine but costly: a plan's problems and notes.

Each function is pure and returns its findings; :func:`~orchestrator.scripts.plan.make_plan`
collects them all, so ``render --check`` lists every problem at once.
"""

from __future__ import annotations

import re

from orchestrator.config import params
from orchestrator.config.params import Settings
from orchestrator.config.profile_schema import Partition, Profile
from orchestrator.pipeline.runargs import JobSpec, lightning_layout
from orchestrator.scripts import partitions
from orchestrator.scripts.devices import Accelerator
from orchestrator.slurm import times


def resource_problems(
    job: JobSpec, p: Profile, tasks: int, accelerator: Accelerator, partition_name: str | None, partition: Partition | None
) -> list[str]:
    found = []
    if not p.uses_slurm and job.nodes != 1:
        found.append(
            f"asks for {job.nodes} nodes, but profile {p.name!r} runs on this one machine: use a Slurm profile (e.g. --cluster testbed)"
        )
    if job.cpus is not None:
        found += cpu_problems(job.cpus, p, partition_name, partition)
    elif p.node.gpus:
        if tasks > p.node.gpus:
            found.append(f"asks for {tasks} GPUs per node, but {p.name} nodes have {p.node.gpus}")
    elif accelerator == "cpu" and tasks > p.node.cores:
        found.append(f"asks for {tasks} processes per node, but {p.name} nodes have {p.node.cores} cores")
    return found


def cpu_problems(cpus: int, p: Profile, partition_name: str | None, partition: Partition | None) -> list[str]:
    """A CPU job's cores against what one node offers (an unknown partition is reported elsewhere)."""
    n = p.node
    if partition and partition.cpus_per_node:
        usable, where = partition.cpus_per_node, f"a node of partition {partition_name} has {partition.cpus_per_node} (its cpus_per_node)"
    elif not p.uses_slurm:
        usable, where = n.usable_cpus, f"profile {p.name!r} runs on this machine, where this process may use {n.usable_cpus} core(s)"
    else:
        reserved = f", {len(n.reserved)} of them reserved" if n.reserved else ""
        usable = n.usable_cpus
        where = f"{p.name} nodes have {usable} usable ({n.cores} cores x {n.threads_per_core} thread(s){reserved})"
    return [f"asks for {cpus} CPUs per task (--cpus {cpus}), but {where}"] if cpus > usable else []


def placeholder_account(p: Profile, account: str | None) -> str | None:
    """What is wrong when the job's account is the profile's example (scheduler.account_example): a
    value from the site's documentation, not the user's project, which sbatch refuses (or bills to a
    stranger's project). `render --check` counts it as a problem (scripts.cluster_checks); the plan
    itself allows it, so that scripts can be rendered and read before an account is known."""
    s = p.scheduler
    if not p.uses_slurm or not account or account != s.account_example or s.account_example_exists:
        return None
    return (
        f"account {account!r} is {p.name}'s example (scheduler.account_example), not your project's: set orchestrator.account "
        "in params.yaml or pass --account"
    )


def cpu_job_billed(job: JobSpec, p: Profile, partition_name: str | None, partition: Partition | None) -> str | None:
    """What an hour of a CPU job costs where it holds GPU nodes (no CPU partition, or one named):
    a whole-node partition bills its nodes as for a GPU job (Frontier, JUWELS Booster); a shared one
    bills the GPUs whose share of the CPUs it takes (LUMI's small-g: a slice of 8 cores per GCD).
    None on a CPU partition (billed in other units than the profile's site.billing) or without billing."""
    billing = p.site.billing
    gpu_nodes = p.node.gpus and (p.node.processes_on or "gpu") == "gpu"
    if job.cpus is None or billing is None or partition is None or not gpu_nodes or partition.cpus_per_node is not None:
        return None
    # Slurm's CPUs are hardware threads (LUMI-G: 128 per node, so a GCD's slice of 8 cores is 16 of them).
    cpus_per_gpu = max(1, p.node.logical_cpus // p.node.gpus)
    gpus = job.nodes * min(p.node.gpus, -(-job.cpus // cpus_per_gpu))  # whole slices, at most the node's GPUs
    return partitions.units(billing.hourly(job.nodes, gpus, partition.whole_node), billing)


def cpu_job_notes(job: JobSpec, p: Profile, partition_name: str | None, partition: Partition | None) -> list[str]:
    """A CPU job on a partition of GPU nodes: allowed (some clusters have no other), but it
    keeps GPUs from the training while using none of them."""
    gpu_nodes = p.node.gpus and (p.node.processes_on or "gpu") == "gpu"
    if job.cpus is None or not p.uses_slurm or partition is None or not gpu_nodes or partition_name == p.scheduler.cpu_partition:
        return []
    held = "a whole GPU node" if partition.whole_node else "a share of a GPU node"
    why = (
        f"{p.name} names no CPU partition (scheduler.cpu_partition)"
        if p.scheduler.cpu_partition is None
        else f"not {p.name}'s CPU partition {p.scheduler.cpu_partition}"
    )
    return [f"a CPU job (--cpus {job.cpus}) on partition {partition_name} ({why}): it holds {held} and uses none of its GPUs"]


def lightning_problems(job: JobSpec, tasks: int) -> list[str]:
    devices, num_nodes = lightning_layout(job.command)
    found = []
    if devices is not None and devices != str(tasks):
        found.append(f"tasks per node ({tasks}, one per GPU) != Lightning devices ({devices}) in the command")
    if num_nodes is not None and num_nodes != str(job.nodes):
        found.append(f"nodes ({job.nodes}) != Lightning num_nodes ({num_nodes}) in the command")
    return found


NO_IMAGE = params.NO_IMAGE


def image_problems(p: Profile, job: JobSpec, settings: Settings) -> list[str]:
    """The stage must depend on the image its tasks run in (see params.Settings.image)."""
    if job.container and p.container.runtime and (settings.image or NO_IMAGE) == NO_IMAGE:
        return [
            f"profile {p.name} runs every task in a container ({p.container.image}), but params.yaml's "
            f"orchestrator.image is {NO_IMAGE!r}: name the containers/images.yaml entry built for it, so that "
            "its digest (containers/<image>.digest, the image's content hash and a dependency of the stage) makes the stage stale when "
            "what goes into the image changes, "
            "or your own image file (a path ending .sif)"
        ]
    return []


def image_notes(p: Profile, job: JobSpec, settings: Settings, inputs: tuple[str, ...] | None) -> tuple[str, ...]:
    """A dvc.yaml item in params' own image file whose stage does not pin it: allowed (see
    params.Settings.image_file), but a new image will not make the item stale."""
    image = settings.image_file
    if image is None or inputs is None or not (job.container and p.container.runtime):
        return ()
    dep = params.digest_dep(image)
    if dep in inputs:
        return ()
    return (
        f"runs in {image}, which no dependency pins: a new image will not make the stage stale; to make it, "
        f"`sha256sum {image} > {dep}` and add {dep} (a path from the project's root) to the stage's deps",
    )


def slurm_problems(
    job: JobSpec, p: Profile, account: str | None, partition_name: str | None, partition: Partition | None, time: str
) -> list[str]:
    s = p.scheduler
    found = []
    example = f" such as {s.account_example}" if s.account_example else ""
    if not account:
        found.append(
            f"no account: set orchestrator.account in params.yaml or pass --account (an account{example} matching {s.account_pattern!r})"
        )
    elif not re.fullmatch(s.account_pattern, account):
        found.append(f"account {account!r} does not match {p.name}'s pattern {s.account_pattern!r} (e.g. {s.account_example or '...'})")
    if partition is None:
        found.append(f"unknown partition {partition_name!r} on {p.name}; partitions: {', '.join(s.partitions)}")
    elif job.nodes > partition.max_nodes:
        found.append(f"asks for {job.nodes} nodes, but partition {partition_name} allows at most {partition.max_nodes}")
    try:
        wanted = times.seconds(time)
    except ValueError as exc:
        found.append(f"time limit: {exc}")
    else:
        if partition and wanted > times.seconds(partition.time_limit(job.nodes)):
            found.append(f"time {time} exceeds partition {partition_name}'s limit of {partition.limit_text(job.nodes)}")
        if wanted == 0:
            found.append("time limit 0: give the job some time")
    return found
