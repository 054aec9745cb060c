"""Planning: a job spec and a cluster profile become the exact job to run.

Pure: no subprocess, no file, no clock, no environment. Everything a script needs
is computed and quoted here (the templates only lay it out), and every way the
job does not fit the cluster is collected as a problem rather than raised, so
``render --check`` lists them all at once.
"""

from __future__ import annotations

import functools
import hashlib
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from orchestrator import __version__
from orchestrator.config import binding, params
from orchestrator.config.params import Settings
from orchestrator.config.profile import LEAKED_CONTAINER_VARS, LoadedProfile, Partition, Profile
from orchestrator.pipeline.runargs import JobSpec, lightning_layout
from orchestrator.scripts import devices, partitions, quoting
from orchestrator.scripts.devices import Accelerator, Devices
from orchestrator.scripts.quoting import Shell, quote, quote_runtime
from orchestrator.slurm import times
from orchestrator.util import patterns

Form = Literal["sbatch", "srun", "local"]
LOG_DIR = ".orchestrator/logs"
# The exit status of a task that checkpointed on the requeue signal: "run me again".
REQUEUE_EXIT = 75
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._@-]")


@dataclass(frozen=True)
class ContainerExec:
    runtime: str
    flags: tuple[Shell, ...]  # one option (with its value) each: GPU flag, binds, working dir
    image: Shell
    setup: str  # shell code run inside the container before the command ("" if none)
    # params' own image file (orchestrator.image: x.sif), absolute: what `render --check` looks for
    # on the cluster (scripts.cluster_checks). None: the profile's container.image.
    file: str | None = None
    # The image's path as the profile or params give it (${USER}-style references unexpanded).
    path: str = ""


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
    master_addr_suffix: str
    max_requeues: int  # 0: no requeue protocol (local form, or no requeue signal)
    secrets: tuple[str, ...]  # environment variables the tasks need, passed by name only
    container: ContainerExec | None
    staging: Staging | None
    command: tuple[str, ...]
    binding: binding.Binding | None
    problems: tuple[str, ...]
    notes: tuple[str, ...] = ()  # what `render` should say about a job that is fine but costly
    billed: str | None = None  # what an hour of the job costs on its partition, in the site's units (profile's site.billing)

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
    p = loaded.profile
    cpus = job.cpus
    if cpus is not None:  # CPU by what it asks for: the stage's choice (devices.choose) does not apply
        device = devices.cpu_job(cpus)
    else:
        device = device or devices.choose(settings.accelerator, loaded, item.split("@", 1)[0], lambda: job.gpus_per_node)
    problems: list[str] = []
    form = form or p.scheduler.launcher
    if (form == "local") == p.uses_slurm:
        allowed = "sbatch or srun" if p.uses_slurm else "local"
        problems.append(f"form {form!r} does not fit profile {p.name!r}: use {allowed}")
    tasks = 1 if cpus is not None else job.gpus_per_node
    account = job.account or settings.account
    time = job.time or settings.time or p.scheduler.default_time
    chosen = None
    if cpus is None and p.uses_slurm:
        chosen = partitions.choose(job.partition or settings.partition, p, job.nodes, job.gpus_per_node, time)
        partition_name = chosen.name
    else:
        partition_name = _partition_name(job, p, settings)
    partition = p.scheduler.partitions.get(partition_name or "")
    problems += device.problems
    problems += _resource_problems(job, p, tasks, device.accelerator, partition_name, partition)
    problems += _lightning_problems(job, tasks)

    bound: binding.Binding | None = None
    if p.uses_slurm:
        problems += _slurm_problems(job, p, account, partition_name, partition, time)
        if p.node.gpus and tasks <= p.node.gpus and cpus is None:
            bound = p.node.binding(tasks)
            problems += binding.problems(bound, tasks, p.node.logical_cpus, p.node.reserved)

    name = safe_name(item)
    log = f"{LOG_DIR}/{name}-%j.log"
    workdir = f"{workspace}/{wdir}" if wdir else workspace
    whole_node = bool(partition and partition.whole_node)
    cpus_per_task = cpus if cpus is not None else (min((len(c) for c in bound.cores), default=0) if bound else 0)
    gpus = tasks if p.node.gpus and cpus is None else 0
    layout = (tasks, gpus, cpus_per_task)
    sched = _scheduler_args(name, account, partition_name, partition, time, job, p, layout, form, log) if p.uses_slurm else ()
    step: list[str] = []
    if p.uses_slurm:
        step.append("--kill-on-bad-exit=1")
        if cpus_per_task:
            step.append(f"--cpus-per-task={cpus_per_task}")
        if bound and whole_node:
            step.append(f"--cpu-bind={bound.srun_value}")
        elif bound or cpus is not None:
            # Masks only hold on whole-node allocations; a CPU job has no GPU to sit next to,
            # so its task gets whole cores wherever Slurm places it.
            step.append("--cpu-bind=cores")
    for arg in sched:
        if not patterns.DIRECTIVE_SAFE.fullmatch(arg):
            problems.append(f"{arg!r} has characters a Slurm directive cannot carry (allowed: letters, digits and ._@%:/+=,-)")

    problems += [
        f"orchestrator.secrets: {n!r} is not an environment variable name" for n in settings.secrets if not patterns.ENV_NAME.fullmatch(n)
    ]
    if inputs is not None:  # a dvc.yaml item (not an ad-hoc job): its deps must name the image
        problems += _image_problems(p, job, settings)
    env = _environment(p, job, item, tasks, name, cpus_per_task, device, workspace)
    staging = None
    if form == "sbatch" and p.storage.workdir_root and inputs is not None:
        # Outputs are staged in too (a requeued run resumes from its checkpoint there);
        # a path that is both a dep and an out is copied once.
        in_place = tuple(i for i in inputs if i not in outputs and _under_any(i, settings.read_in_place))
        copied = tuple(dict.fromkeys(i for i in (*inputs, *outputs) if i not in in_place))
        staging = Staging(copied, outputs, p.storage.node_local, in_place)
        env += (_shared(("ORCH_STAGE", Shell('"$ORCH_WORKDIR/work"'))),)
    run_dir = _shared(
        Shell('"$ORCH_STAGE"' + quote("/" + wdir)) if staging and wdir else Shell('"$ORCH_STAGE"') if staging else quote(workdir)
    )
    container = _container(p, job, workspace, run_dir, problems, settings.image_file) if job.container and p.container.runtime else None
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
        tasks_per_node=tasks,
        gpus_per_node=0 if cpus is not None else tasks if p.node.gpus or device.accelerator == "gpu" else 0,
        cpus=cpus,
        accelerator=device.accelerator,
        account=account if p.uses_slurm else None,
        partition=partition_name if p.uses_slurm else None,
        time=time if p.uses_slurm else None,
        scheduler_args=sched,
        step_args=_shared(tuple(step)),
        unset=_shared(LEAKED_CONTAINER_VARS + tuple(v for v in p.environment.unset if v not in LEAKED_CONTAINER_VARS)),
        env=env,
        node_local_dirs=_shared(p.environment.node_local_dirs + _compile_caches(p)),
        master_addr_suffix=p.environment.master_addr_suffix,
        max_requeues=p.scheduler.max_requeues if p.uses_slurm and p.requeue_signal_name else 0,
        secrets=settings.secrets,
        container=_shared(container),
        staging=staging,
        command=job.command,
        binding=_shared(bound if whole_node else None),
        problems=tuple(problems),
        notes=tuple(_cpu_job_notes(job, p, partition_name, partition))
        + _image_notes(p, job, settings, inputs)
        + ((chosen.note,) if chosen and chosen.note else ()),
        billed=chosen.billed if chosen else _cpu_job_billed(job, p, partition_name, partition),
    )


# The parts of a plan that items of one layout have in common (binding masks, the
# environment, the container call: 9 kB of a plan's 10) are kept once, so a matrix of
# 100,000 plans costs what its distinct layouts cost, not 100,000 copies. Bounded, so a
# long-lived process (a notebook, the test suite) never grows without end.
_SHARED: dict = {}
_T = TypeVar("_T")
_SHARED_MAX = 4096


def _shared(value: _T) -> _T:
    if len(_SHARED) >= _SHARED_MAX:
        _SHARED.clear()
    return _SHARED.setdefault(value, value)


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


def _resource_problems(
    job: JobSpec, p: Profile, tasks: int, accelerator: Accelerator, partition_name: str | None, partition: Partition | None
) -> list[str]:
    found = []
    if not p.uses_slurm and job.nodes != 1:
        found.append(
            f"asks for {job.nodes} nodes, but profile {p.name!r} runs on this one machine: use a Slurm profile (e.g. --cluster testbed)"
        )
    if job.cpus is not None:
        found += _cpu_problems(job.cpus, p, partition_name, partition)
    elif p.node.gpus:
        if tasks > p.node.gpus:
            found.append(f"asks for {tasks} GPUs per node, but {p.name} nodes have {p.node.gpus}")
    elif accelerator == "cpu" and tasks > p.node.cores:
        found.append(f"asks for {tasks} processes per node, but {p.name} nodes have {p.node.cores} cores")
    return found


def _cpu_problems(cpus: int, p: Profile, partition_name: str | None, partition: Partition | None) -> list[str]:
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


def _cpu_job_billed(job: JobSpec, p: Profile, partition_name: str | None, partition: Partition | None) -> str | None:
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


def _cpu_job_notes(job: JobSpec, p: Profile, partition_name: str | None, partition: Partition | None) -> list[str]:
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


def _lightning_problems(job: JobSpec, tasks: int) -> list[str]:
    devices, num_nodes = lightning_layout(job.command)
    found = []
    if devices is not None and devices != str(tasks):
        found.append(f"tasks per node ({tasks}, one per GPU) != Lightning devices ({devices}) in the command")
    if num_nodes is not None and num_nodes != str(job.nodes):
        found.append(f"nodes ({job.nodes}) != Lightning num_nodes ({num_nodes}) in the command")
    return found


NO_IMAGE = params.NO_IMAGE


def _image_problems(p: Profile, job: JobSpec, settings: Settings) -> list[str]:
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


def _image_notes(p: Profile, job: JobSpec, settings: Settings, inputs: tuple[str, ...] | None) -> tuple[str, ...]:
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


def _slurm_problems(
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


def _scheduler_args(name, account, partition_name, partition, time, job, p, layout, form, log) -> tuple[str, ...]:
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
    return (args[0], *map(_shared, args[1:-1]), args[-1])  # all but the first and last are the layout's


def _environment(
    p: Profile, job: JobSpec, item: str, tasks: int, name: str, cpus_per_task: int, device: Devices, workspace: str
) -> tuple[tuple[str, Shell], ...]:
    # A CPU job's threads are its --cpus, whatever the profile sets for the GPU jobs' tasks.
    own_threads = job.cpus is not None
    variables = sorted((k, v) for k, v in p.environment.variables.items() if not (own_threads and k == "OMP_NUM_THREADS"))
    env: list[tuple[str, Shell]] = [(k, quote_runtime(v)) for k, v in variables]
    if device.hide_gpus:
        env += [(var, quote("")) for var in devices.HIDE_GPUS]
    if own_threads or "OMP_NUM_THREADS" not in p.environment.variables:
        # One OpenMP thread per core the task owns: left unset, every task starts one
        # per core of the node, and oversubscribed OpenMP spins (10x slower steps seen
        # on a loaded 2-core machine).
        env.append(("OMP_NUM_THREADS", quote(cpus_per_task or max(1, p.node.cores // tasks))))
    env += [
        ("ORCH_ITEM", quote(item)),
        ("ORCH_PROFILE", quote(p.name)),
        ("ORCH_NUM_NODES", quote(job.nodes)),
        ("ORCH_DEVICES", quote(tasks)),
        # The training's --accelerator default (experiments.common.args): never `auto` in a job.
        ("ORCH_ACCELERATOR", quote(device.accelerator)),
    ]
    if p.uses_slurm and p.requeue_signal_name:
        env.append(("ORCH_REQUEUE_SIGNAL", quote(p.requeue_signal_name)))
    peak = p.node.gpu.peak_tflops_bf16 if p.node.gpu else device.peak_tflops_bf16
    if peak and device.accelerator == "gpu":
        # The training's MFU against the profile's (or this machine's GPU's) peak, as the report computes it.
        env.append(("ORCH_PEAK_TFLOPS", quote(f"{peak:g}")))
    for var in _compile_caches(p):
        env.append((var, Shell(quote_runtime(p.storage.compile_cache or "") + quote(COMPILE_CACHES[var]))))
    if p.storage.workdir_root:
        # Per item and per workspace: the same item of two clones, or of two DVC experiments
        # running at once (each in its own copy under .dvc/tmp/exps/), never shares a folder.
        env.append(("ORCH_WORKDIR", Shell(quote_runtime(p.storage.workdir_root) + quote(f"/{name}.{workspace_tag(workspace)}"))))
    return tuple(pair if pair[0] in _PER_ITEM else _shared(pair) for pair in env)


_PER_ITEM = ("ORCH_ITEM", "ORCH_WORKDIR")


@functools.lru_cache(maxsize=64)
def workspace_tag(workspace: str) -> str:
    """A short hash of the workspace's path, in the names of its per-item folders on shared storage."""
    return hashlib.sha256(workspace.encode("utf-8", "surrogatepass")).hexdigest()[:8]


# torch.compile's cache variables, each under the profile's storage.compile_cache.
COMPILE_CACHES = {"TORCHINDUCTOR_CACHE_DIR": "/inductor", "TRITON_CACHE_DIR": "/triton"}


def _compile_caches(p: Profile) -> tuple[str, ...]:
    """The cache variables the plan sets: those the profile's own variables leave unset."""
    if not p.storage.compile_cache:
        return ()
    return tuple(v for v in COMPILE_CACHES if v not in p.environment.variables)  # the environment's values that differ between items


def _container(p: Profile, job: JobSpec, workspace: str, run_dir: Shell, problems: list[str], file: str | None) -> ContainerExec | None:
    """``file``: params' own image file (absolute, or relative to the workspace), run in place of the profile's image."""
    c = p.container
    if file is not None:
        file = posixpath.normpath(posixpath.join(workspace, file))
    elif not c.image:
        problems.append(f"profile {p.name} names a container runtime but no image (container.image)")
        return None
    flags: list[Shell] = []
    if c.gpu_flag and p.node.gpus and job.cpus is None:  # a CPU job asks for no GPU to pass in
        flags.append(Shell(c.gpu_flag))
    binds: list[Shell] = [quote_runtime(b) for b in c.binds]
    binds.append(quote(workspace))
    binds += [quote(b) for b in job.binds]
    if p.storage.workdir_root:
        binds.append(Shell('"$ORCH_WORKDIR"'))
    for path in (workspace, *job.binds):
        if "," in path or ":" in path:
            problems.append(f"cannot bind {path!r} into the container: apptainer bind paths may not contain ',' or ':'")
    flags += [Shell(f"--bind {b}") for b in binds]
    flags.append(Shell(f"--pwd {run_dir}"))
    # The job's code is the run dir's (the workspace or its staged copy), never a copy in the
    # image: first on PYTHONPATH, so `python experiments/x.py` imports it too. The runtime
    # expands ${PYTHONPATH} inside the container, to the image's own entries, kept after it
    # (none: no trailing ':', which would add the working directory); the host's does not get in.
    flags.append(Shell(f"--env PYTHONPATH={run_dir}" + "'${PYTHONPATH:+:$PYTHONPATH}'"))
    setup = "; ".join((*c.setup, 'exec "$@"')) if c.setup else ""
    image = quote(file) if file is not None else quote_runtime(c.image or "")
    return ContainerExec(runtime=c.runtime or "", flags=tuple(flags), image=image, setup=setup, file=file, path=file or c.image or "")
