"""Planning: a job spec and a cluster profile become the exact job to run.

Pure: no subprocess, no file, no clock, no environment. Everything a script needs
is computed and quoted here (the templates only lay it out), and every way the
job does not fit the cluster is collected as a problem rather than raised, so
``render --check`` lists them all at once.

:func:`make_plan` is a sequence of named steps; the parts it puts together are their own
modules: the problems and notes (:mod:`~orchestrator.scripts.plan_checks`), the Slurm options
(:mod:`~orchestrator.scripts.directives`), the tasks' environment
(:mod:`~orchestrator.scripts.job_environment`) and the container call
(:mod:`~orchestrator.scripts.container_exec`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from orchestrator import __version__
from orchestrator.config import binding
from orchestrator.config.params import Settings
from orchestrator.config.profile_schema import LEAKED_CONTAINER_VARS, LoadedProfile, Partition, Profile
from orchestrator.pipeline.runargs import JobSpec
from orchestrator.scripts import costs, devices, partitions, quoting, ranks
from orchestrator.scripts.container_exec import ContainerExec, container_exec
from orchestrator.scripts.devices import Accelerator, Devices
from orchestrator.scripts.directives import request_problems, scheduler_args, step_args
from orchestrator.scripts.interned import shared
from orchestrator.scripts.job_environment import compile_caches, environment
from orchestrator.scripts.plan_checks import (
    cpu_job_billed,
    cpu_job_notes,
    image_notes,
    image_problems,
    lightning_problems,
    resource_problems,
    slurm_problems,
)
from orchestrator.scripts.quoting import Shell, quote
from orchestrator.slurm.requests import Requests
from orchestrator.util import patterns

Form = Literal["sbatch", "srun", "local"]
LOG_DIR = ".orchestrator/logs"
# The exit status of a task that checkpointed on the requeue signal: "run me again".
REQUEUE_EXIT = 75
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._@-]")


@dataclass(frozen=True)
class Staging:
    """The job runs from a copy of its inputs on the profile's fast storage."""

    inputs: tuple[str, ...]  # relative to the workspace: deps, and outs (a requeued run's checkpoint)
    outputs: tuple[str, ...]  # relative to the workspace: copied back at the end and before a requeue
    node_local: bool  # copy onto every node (else once, from the batch script)
    in_place: tuple[str, ...] = ()  # inputs linked to where they are, not copied (params' read_in_place)


@dataclass(frozen=True)
class Plan:
    """Everything about one job, ready to render; ``problems`` lists what is wrong."""

    item: str
    profile: str
    profile_source: str
    form: Form
    version: str
    job_name: str
    workspace: str
    workdir: str  # the stage's wdir in the workspace
    run_dir: Shell  # where the command runs: workdir, or its copy on fast storage
    log: str  # relative to the workspace
    nodes: int
    tasks_per_node: int
    gpus_per_node: int
    cpus: int | None  # a CPU job's cores per task (`run --cpus`); None: the GPU layout
    accelerator: Accelerator  # where the processes run, decided per stage (scripts.devices)
    account: str | None
    partition: str | None
    time: str | None
    scheduler_args: tuple[str, ...]  # directives: safe characters only, no quoting needed
    step_args: tuple[str, ...]  # srun arguments of the job step
    unset: tuple[str, ...]
    env: tuple[tuple[str, Shell], ...]  # exported in every task
    node_local_dirs: tuple[str, ...]
    ranks: tuple[tuple[str, Shell], ...]  # RANK, WORLD_SIZE, MASTER_ADDR...: set in each task (scripts.ranks)
    max_requeues: int  # 0: no requeue protocol (local form, or no requeue signal)
    secrets: tuple[str, ...]  # environment variables the tasks need, passed by name only
    container: ContainerExec | None
    staging: Staging | None
    command: tuple[str, ...]
    binding: binding.Binding | None
    problems: tuple[str, ...]
    notes: tuple[str, ...] = ()  # what `render` should say about a job that is fine but costly
    billed: str | None = None  # what an hour of the job costs on its partition, in the site's units (profile's site.billing)
    # Memory, QOS, reservation, constraint and sbatch options asked for: the stage's over params.yaml's
    # (in scheduler_args as directives; `render`'s table shows them).
    requests: Requests = Requests()
    # What the job is billed for and does not use, with the shapes that would not waste (scripts.costs);
    # `render` and `submit` warn of it. None: nothing known to be wasted.
    waste: str | None = None

    @property
    def command_line(self) -> Shell:
        return quoting.join(self.command)

    @property
    def srun_args(self) -> tuple[str, ...]:
        """The blocking form's srun arguments: allocation and step in one call."""
        return self.scheduler_args + tuple(a for a in self.step_args if a not in self.scheduler_args)


# Room for what is added to a name in a file name (".json.damaged-<time>-<pid>", an
# atomic write's ".<name>.<random>.tmp", "-<job id>.log") within the 255 bytes most
# file systems allow.
_NAME_BYTES = 160
_HASH_CHARS = 10


def safe_form(item: str) -> str:
    """DVC's name with characters that are unusual in file and job names replaced."""
    return _UNSAFE_NAME.sub("_", item)


def safe_name(item: str) -> str:
    """The file and job name of an item: a function of its exact name that never collides.

    A name that is already safe and short is its own; any other is its safe form, cut
    to fit, plus ``+`` and a short hash of the exact name (``a b`` -> ``a_b+<hash>``,
    while ``a_b`` stays ``a_b``). ``+`` is not in the safe alphabet, so a hashed name
    never equals a name that was kept.
    """
    safe = safe_form(item)
    if safe == item and len(item) <= _NAME_BYTES:
        return item
    digest = hashlib.sha256(item.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]
    return f"{safe[: _NAME_BYTES - _HASH_CHARS - 1]}+{digest}"  # ASCII: characters are bytes


def make_plan(
    job: JobSpec,
    item: str,
    wdir: str,
    loaded: LoadedProfile,
    settings: Settings,
    workspace: str,
    form: Form | None = None,
    *,
    inputs: tuple[str, ...] | None = None,
    outputs: tuple[str, ...] = (),
    device: Devices | None = None,
) -> Plan:
    """The job for ``item``; ``inputs``/``outputs`` (relative to the workspace) are what
    staging copies (None: not known, so the job runs in the workspace itself).
    ``device``: the choice for the item's stage (None: made from this item alone)."""
    p = _staged_here(loaded.profile, settings)
    device = _device(job, item, loaded, settings, device)
    form = form or p.scheduler.launcher
    place = _placement(job, p, settings)
    problems = [*_form_problems(form, p), *device.problems]
    problems += resource_problems(job, p, place.tasks, device.accelerator, place.partition_name, place.partition)
    problems += lightning_problems(job, place.tasks)
    bound = _binding(job, p, place, problems)
    name = safe_name(item)
    log = f"{LOG_DIR}/{name}-%j.log"
    workdir = f"{workspace}/{wdir}" if wdir else workspace
    whole_node = bool(place.partition and place.partition.whole_node)
    cpus_per_task = job.cpus if job.cpus is not None else (min((len(c) for c in bound.cores), default=0) if bound else 0)
    asked = job.requests.over(settings.requests) if p.uses_slurm else Requests()
    sched = _directives(job, p, place, form, name, log, cpus_per_task, asked, problems)
    problems += _secret_problems(settings)
    if inputs is not None:  # a dvc.yaml item (not an ad-hoc job): its deps must name the image
        problems += image_problems(p, job, settings)
    env = environment(p, job, item, place.tasks, name, cpus_per_task, device, workspace)
    staging = _staging(form, p, settings, inputs, outputs)
    if staging:
        env += (shared(("ORCH_STAGE", Shell('"$ORCH_WORKDIR/work"'))),)
    run_dir = _run_dir(staging, wdir, workdir)
    container = container_exec(p, job, workspace, run_dir, problems, settings.image_file) if job.container and p.container.runtime else None
    waste = costs.waste(p, job.nodes, place.tasks, place.partition_name, place.partition, place.time) if place.chosen else None
    return Plan(
        item=item,
        profile=p.name,
        profile_source=loaded.source,
        form=form,
        version=__version__,
        job_name=name,
        workspace=workspace,
        workdir=workdir,
        run_dir=run_dir,
        log=log,
        nodes=job.nodes,
        tasks_per_node=place.tasks,
        gpus_per_node=0 if job.cpus is not None else place.tasks if p.node.gpus or device.accelerator == "gpu" else 0,
        cpus=job.cpus,
        accelerator=device.accelerator,
        account=place.account if p.uses_slurm else None,
        partition=place.partition_name if p.uses_slurm else None,
        time=place.time if p.uses_slurm else None,
        scheduler_args=sched,
        step_args=shared(step_args(job.cpus, cpus_per_task, bound, whole_node) if p.uses_slurm else ()),
        unset=shared(_unset(p)),
        env=env,
        node_local_dirs=shared(p.environment.node_local_dirs + compile_caches(p)),
        ranks=shared(ranks.slurm(p.environment.master_addr_suffix) if p.uses_slurm else ranks.local(place.tasks)),
        max_requeues=p.scheduler.max_requeues if p.uses_slurm and p.requeue_signal_name else 0,
        secrets=settings.secrets,
        container=shared(container),
        staging=staging,
        command=job.command,
        binding=shared(bound if whole_node else None),
        problems=tuple(problems),
        notes=_notes(job, p, settings, inputs, place, waste),
        billed=place.chosen.billed if place.chosen else cpu_job_billed(job, p, place.partition_name, place.partition),
        requests=asked,
        waste=waste,
    )


@dataclass(frozen=True)
class _Placement:
    """Where and as whom the job runs: its tasks per node, account, time limit and partition."""

    tasks: int
    account: str | None
    time: str
    partition_name: str | None
    partition: Partition | None
    chosen: partitions.Choice | None  # the partition choice a GPU job on Slurm gets (with its note and cost)


def _device(job: JobSpec, item: str, loaded: LoadedProfile, settings: Settings, device: Devices | None) -> Devices:
    """Where the processes run: a CPU job by what it asks for (the stage's choice does not apply), else the stage's choice."""
    if job.cpus is not None:
        return devices.cpu_job(job.cpus)
    return device or devices.choose(settings.accelerator, loaded, item.split("@", 1)[0], lambda: job.gpus_per_node)


def _form_problems(form: Form, p: Profile) -> list[str]:
    if (form == "local") == p.uses_slurm:
        allowed = "sbatch or srun" if p.uses_slurm else "local"
        return [f"form {form!r} does not fit profile {p.name!r}: use {allowed}"]
    return []


def _placement(job: JobSpec, p: Profile, settings: Settings) -> _Placement:
    tasks = 1 if job.cpus is not None else job.gpus_per_node
    time = job.time or settings.time or p.scheduler.default_time
    chosen = None
    if job.cpus is None and p.uses_slurm:
        chosen = partitions.choose(job.partition or settings.partition, p, job.nodes, job.gpus_per_node, time)
        partition_name = chosen.name
    else:
        partition_name = _partition_name(job, p, settings)
    partition = p.scheduler.partitions.get(partition_name or "")
    return _Placement(tasks, job.account or settings.account, time, partition_name, partition, chosen)


def _binding(job: JobSpec, p: Profile, place: _Placement, problems: list[str]) -> binding.Binding | None:
    """The tasks' CPU masks next to their GPUs (a GPU job on a Slurm profile's GPU nodes); the
    Slurm problems, and the masks', added to ``problems``."""
    if not p.uses_slurm:
        return None
    problems += slurm_problems(job, p, place.account, place.partition_name, place.partition, place.time)
    if not (p.node.gpus and place.tasks <= p.node.gpus and job.cpus is None):
        return None
    bound = p.node.binding(place.tasks)
    problems += binding.problems(bound, place.tasks, p.node.logical_cpus, p.node.reserved)
    return bound


def _directives(
    job: JobSpec,
    p: Profile,
    place: _Placement,
    form: Form,
    name: str,
    log: str,
    cpus_per_task: int,
    asked: Requests,
    problems: list[str],
) -> tuple[str, ...]:
    """The ``#SBATCH`` directives (none without Slurm); one a directive cannot carry, and
    requests that contradict the partition or the node, added to ``problems``."""
    if not p.uses_slurm:
        return ()
    gpus = place.tasks if p.node.gpus and job.cpus is None else 0
    layout = (place.tasks, gpus, cpus_per_task)
    sched = scheduler_args(name, place.account, place.partition_name, place.partition, place.time, job, p, layout, form, log, asked)
    problems += request_problems(asked, place.partition_name, place.partition, gpus, p)
    for arg in sched:
        # A constraint's & | [ ] * are Slurm's operators: no shell reads a directive, and srun's are quoted.
        safe = patterns.CONSTRAINT_SAFE if arg.startswith("--constraint=") else patterns.DIRECTIVE_SAFE
        if not safe.fullmatch(arg):
            problems.append(f"{arg!r} has characters a Slurm directive cannot carry (allowed: letters, digits and ._@%:/+=,-)")
    return sched


def _unset(p: Profile) -> tuple[str, ...]:
    """What the script clears first: what an outer container or launcher leaks, and the profile's own."""
    leaked = LEAKED_CONTAINER_VARS + ranks.LEAKED_LAUNCHER_VARS
    return leaked + tuple(v for v in p.environment.unset if v not in leaked)


def _secret_problems(settings: Settings) -> list[str]:
    return [
        f"orchestrator.secrets: {n!r} is not an environment variable name" for n in settings.secrets if not patterns.ENV_NAME.fullmatch(n)
    ]


# Where params' orchestrator.stage_locally stages on a profile that names no storage.workdir_root:
# per user (a /tmp folder one user made, others could not write into), outside the project,
# so a path that climbs out of the copy (`../data`) fails as it fails on the cluster.
LOCAL_STAGE_ROOT = "/tmp/orchestrator-${USER}/stage"


def _staged_here(p: Profile, settings: Settings) -> Profile:
    """``p``, with a working dir to stage into where params stage on this machine (stage_locally)."""
    if not settings.stage_locally or p.uses_slurm or p.storage.workdir_root:
        return p
    return replace(p, storage=replace(p.storage, workdir_root=LOCAL_STAGE_ROOT, node_local=False))


def _staging(form: Form, p: Profile, settings: Settings, inputs: tuple[str, ...] | None, outputs: tuple[str, ...]) -> Staging | None:
    """What a batch job (or, with stage_locally, a local one) copies to the profile's fast
    storage (None: it runs in the workspace)."""
    staged_form = form == "sbatch" or (form == "local" and settings.stage_locally)
    if not (staged_form and p.storage.workdir_root and inputs is not None):
        return None
    # Outputs are staged in too (a requeued run resumes from its checkpoint there);
    # a path that is both a dep and an out is copied once.
    in_place = tuple(i for i in inputs if i not in outputs and _under_any(i, settings.read_in_place))
    copied = tuple(dict.fromkeys(i for i in (*inputs, *outputs) if i not in in_place))
    return Staging(copied, outputs, p.storage.node_local, in_place)


def _run_dir(staging: Staging | None, wdir: str, workdir: str) -> Shell:
    """Where the command runs: the stage's wdir, in the staged copy when there is one."""
    if staging and wdir:
        return shared(Shell('"$ORCH_STAGE"' + quote("/" + wdir)))
    return shared(Shell('"$ORCH_STAGE"') if staging else quote(workdir))


def _notes(
    job: JobSpec, p: Profile, settings: Settings, inputs: tuple[str, ...] | None, place: _Placement, waste: str | None
) -> tuple[str, ...]:
    # A named partition that bills more than another: the cost warning says it too, with the figures.
    chosen = (place.chosen.note,) if place.chosen and place.chosen.note and not waste else ()
    return tuple(cpu_job_notes(job, p, place.partition_name, place.partition)) + image_notes(p, job, settings, inputs) + chosen


def _under_any(path: str, folders: tuple[str, ...]) -> bool:
    """Whether ``path`` is one of ``folders`` or inside one of them (paths relative to the project)."""
    parts = Path(path).parts
    return any(parts[: len(Path(f).parts)] == Path(f).parts for f in folders)


def _partition_name(job: JobSpec, p: Profile, settings: Settings) -> str | None:
    if job.partition:
        return job.partition
    if job.cpus is not None:
        # params' orchestrator.partition is where the GPU jobs go (the training's partition,
        # often set per cluster): ahead of the profile's CPU partition it would put every CPU
        # job on GPU nodes. Without a CPU partition, CPU jobs go where the GPU jobs go.
        return p.scheduler.cpu_partition or settings.partition or p.scheduler.default_partition
    return settings.partition or p.scheduler.default_partition
