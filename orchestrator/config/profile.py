"""Cluster profiles: the facts about a cluster, as data.

A profile is a YAML file (the built-in ones ship in ``orchestrator/config/profiles``)
turned once into frozen dataclasses, then checked for meaning (partitions exist,
times parse, the topology is consistent). ``--cluster`` takes a built-in name or
a path; ``orchestrator clusters show NAME --format yaml`` prints the file a user
copies, edits and passes back.

Values that are only known on the compute node (``${USER}``, ``${SLURM_NODEID}``,
``${SLURM_JOB_ACCOUNT}``) are written as ``${NAME}`` runtime templates; no other
shell expansion is allowed in profile values (see :mod:`orchestrator.scripts.quoting`). The container
``setup`` lines are the one exception: they are shell code by design.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Literal

from orchestrator.config import binding
from orchestrator.config.machine import Machine
from orchestrator.errors import ConfigError, ProfileError, UnreadableFile
from orchestrator.slurm import times
from orchestrator.util import files, patterns, yamlio

BUILTIN_DIR = Path(__file__).parent / "profiles"
# Variables an outer container leaks into everything started from it (a job started
# from a shell inside a container inherits its SINGULARITY_BIND); APPTAINER_BIND even
# overrides SINGULARITY_BIND.
LEAKED_CONTAINER_VARS = tuple(
    f"{prefix}_{name}"
    for prefix in ("APPTAINER", "SINGULARITY")
    for name in ("BIND", "BINDPATH", "CONTAINER", "NAME", "ENVIRONMENT", "COMMAND", "APPNAME")
)
_SIGNAL = re.compile(r"(SIG)?([A-Z0-9]+)@(\d+)")


@dataclass(frozen=True)
class Partition:
    max_nodes: int
    max_time: str
    whole_node: bool = False  # allocations are whole nodes, so CPU masks apply
    qos: str | None = None
    constraint: str | None = None
    # The CPUs (hardware threads) a job may use on one node of this partition, where its
    # nodes are not the profile's `node` (LUMI-C's CPU nodes under the LUMI-G profile).
    # None: the profile's node (Node.usable_cpus).
    cpus_per_node: int | None = None
    # False: used only when a job names it (debug queues, few jobs per user); True: the plan
    # may pick it for a job that names none, where it bills least (scripts/partitions.py).
    automatic: bool = True
    # The partition as Slurm knows it, where this entry is a queue of another partition by its
    # QOS (Frontier's debug queue is `-p batch -q debug`). None: the entry's own name.
    slurm_partition: str | None = None
    # Sites that cap the time limit by the job's size (Frontier's batch: 2 h up to 91 nodes, 6 h up
    # to 183): {N: T} means a job of up to N nodes gets at most T; larger jobs get max_time.
    max_time_by_nodes: dict[int, str] = field(default_factory=dict)
    # The memory a job asks for, as the site's own examples ask it (a Slurm size: 60G, 491520M):
    # mem_per_gpu on partitions that share nodes (`--mem-per-gpu`, LUMI's small-g: without it a job
    # gets the site's default per-CPU memory), mem on whole-node ones (`--mem`, per node). At most
    # one (Slurm refuses --mem with --mem-per-gpu). None: not requested, the site's default applies.
    mem_per_gpu: str | None = None
    mem: str | None = None

    def time_limit(self, nodes: int) -> str:
        """The longest time a job of ``nodes`` nodes may ask for here."""
        return next((self.max_time_by_nodes[n] for n in sorted(self.max_time_by_nodes) if nodes <= n), self.max_time)

    def time_rule(self) -> str:
        """The time limits in words: ``12:00:00``, or by job size ``up to 91 nodes 02:00:00, ..., else 12:00:00``."""
        bins = [f"up to {n} nodes {t}" for n, t in sorted(self.max_time_by_nodes.items())]
        return ", ".join([*bins, f"else {self.max_time}"]) if bins else self.max_time

    def limit_text(self, nodes: int) -> str:
        """``time_limit`` with the rule it came from, for messages."""
        if not self.max_time_by_nodes:
            return self.max_time
        return f"{self.time_limit(nodes)} for {nodes} node{'s' if nodes != 1 else ''} (by job size: {self.time_rule()})"


@dataclass(frozen=True)
class Scheduler:
    kind: Literal["slurm", "none"]
    launcher: Literal["sbatch", "srun", "local"] = "sbatch"
    cluster_name: str | None = None  # Slurm's ClusterName on this cluster
    account_pattern: str = ".+"  # regular expression an account must match in full
    account_example: str | None = None
    # True where the example is an account that exists (the testbed makes its own): no warning when a
    # job uses it. False (real sites): the example is a placeholder, and a job using it is warned of
    # (`render`) and refused by `render --check`.
    account_example_exists: bool = False
    default_partition: str | None = None
    default_time: str = "01:00:00"
    # Sent to every task this long before the time limit: the training checkpoints
    # and exits 75, and the job script requeues the job (up to max_requeues times).
    requeue_signal: str | None = "USR1@90"
    max_requeues: int = 3
    # A job that fails because of a node (Slurm's NODE_FAIL, or an interconnect error in
    # its log) is submitted again without that node, this many times, waiting
    # retry_backoff_s, then twice that, and so on, in between.
    node_fault_retries: int = 2
    retry_backoff_s: float = 60.0
    partitions: dict[str, Partition] = field(default_factory=dict)
    # Where the small job that records a detached submit's results runs (a cheap
    # CPU partition); None: run `dvc repro` yourself when the jobs end.
    service_partition: str | None = None
    # Where CPU jobs (`orchestrator run --cpus N`: corpus preparation, tokenising) run: a
    # partition without GPUs. None: the cluster has none here, and CPU jobs share the GPU nodes.
    cpu_partition: str | None = None
    # A job Slurm will not start without someone acting (held, or pending for a reason
    # that never clears by itself) is reported at once; `orchestrator run` gives up
    # waiting for it after this long (the job stays queued: release or cancel it).
    stuck_timeout_s: float = 600.0
    # Options every job of the site carries that the plan does not derive (Frontier's
    # `--network=disable_rdzv_get`, which its RCCL rendezvous variables need): `--name`
    # or `--name=value`, on the #SBATCH lines and srun's command line.
    extra_options: tuple[str, ...] = ()


# The options the orchestrator sets itself, in the script (the plan) or on sbatch's command
# line: a profile's extra_options may not set them a second time. --error would take the job's
# stderr away from the log that status, logs and a failed run show.
PLANNED_OPTIONS = frozenset(
    "job-name account partition qos constraint time nodes ntasks-per-node gpus-per-node cpus-per-task exclusive "
    "signal requeue open-mode output error chdir dependency array mem mem-per-gpu".split()
)
# sbatch's one-letter forms of those, which it reads as the same options.
_SHORT_OPTIONS = {
    "J": "job-name", "A": "account", "p": "partition", "q": "qos", "C": "constraint", "t": "time", "N": "nodes",
    "c": "cpus-per-task", "o": "output", "e": "error", "D": "chdir", "d": "dependency", "a": "array",
}  # fmt: skip
# sbatch options in their own right that are also the start of a planned one (sbatch takes any
# unambiguous start of a long option as the option: --err is --error).
_OWN_OPTIONS = frozenset({"gpus", "ntasks"})
_OPTION = re.compile(r"--([a-z][a-z-]*)(=[A-Za-z0-9._@%:/+,-]+)?")


def _planned(name: str) -> str | None:
    """The planned option(s) that ``--name`` may set: itself, or those it is the start of."""
    if name in PLANNED_OPTIONS:
        return name
    if name in _OWN_OPTIONS:
        return None
    return " or --".join(o for o in sorted(PLANNED_OPTIONS) if o.startswith(name)) or None


def _extra_option_problem(option: str) -> str | None:
    managed = f"the orchestrator sets these itself: {', '.join(f'--{o}' for o in sorted(PLANNED_OPTIONS))}"
    short = re.match(r"-([A-Za-z])", option)
    if short and not option.startswith("--"):
        if short.group(1) in _SHORT_OPTIONS:
            return f"scheduler.extra_options: {option!r} is --{_SHORT_OPTIONS[short.group(1)]}; leave it out ({managed})"
        return f"scheduler.extra_options: {option!r} is not --name or --name=value (write the long form of the option)"
    match = _OPTION.fullmatch(option)
    if match is None:
        return f"scheduler.extra_options: {option!r} is not --name or --name=value (letters, digits, ._@%:/+,- in the value)"
    planned = _planned(match.group(1))
    if planned is not None:
        said = f"--{planned}" if planned == match.group(1) else f"{option!r} is --{planned}, which"
        return f"scheduler.extra_options: {said} is set by the orchestrator itself; leave it out ({managed})"
    return None


@dataclass(frozen=True)
class Gpu:
    model: str
    memory_gb: float
    peak_tflops_bf16: float | None = None  # per device, dense; used for MFU
    # Per device, W: the board's power limit (TDP), for energy estimates when nothing was
    # measured. Training rarely draws all of it, so such an estimate leans high.
    power_w: float | None = None


@dataclass(frozen=True)
class Node:
    cores: int
    threads_per_core: int = 1
    reserved_cores: str = ""  # cpulist of cores jobs may not use (low-noise mode)
    gpus: int = 0
    gpu_cores: tuple[str, ...] = ()  # per GPU: cpulist of its closest cores
    cpu_masks: tuple[yamlio.Hex, ...] | None = None  # explicit masks, one per GPU, instead of deriving
    gpu: Gpu | None = None
    # Where the processes of a job run: gpu (the default on nodes with GPUs) or cpu, for
    # nodes whose GPUs are scheduler stand-ins on CPU-only hosts (the testbed).
    processes_on: Literal["gpu", "cpu"] | None = None
    memory_gb: float | None = None
    # Per GPU, one direction, GB/s (nominal; `orchestrator plan`'s communication model):
    # to its peers inside the node, and its share of the node's network injection.
    intra_node_gbps: float | None = None
    inter_node_gbps: float | None = None

    @cached_property
    def reserved(self) -> frozenset[int]:
        return binding.parse_cpulist(self.reserved_cores) if self.reserved_cores else frozenset()

    @property
    def logical_cpus(self) -> int:
        return self.cores * self.threads_per_core

    @property
    def usable_cpus(self) -> int:
        """The CPUs (hardware threads) a job may use: a reserved core takes its threads with it."""
        return (self.cores - len(self.reserved)) * self.threads_per_core

    @functools.lru_cache(maxsize=256)  # noqa: B019 - nodes are frozen and few; every item of a layout asks again
    def binding(self, tasks: int) -> binding.Binding:
        """CPU masks for ``tasks`` tasks per node (explicit ones win over derived)."""
        if self.cpu_masks is not None:
            return binding.Binding(tuple(binding.cores_of(m) for m in self.cpu_masks[:tasks]))
        gpu_cores = [binding.parse_cpulist(c) for c in self.gpu_cores]
        return binding.derive(gpu_cores, self.reserved, tasks)


# How `container build NAME --on-cluster` builds without root in a job: `fakeroot` is
# `apptainer build --fakeroot` (or singularity's; needs user namespaces or the site's
# fakeroot setup); `proot` is SingularityCE's unprivileged proot build (`singularity build`
# without --fakeroot, with `proot` on PATH), for sites with neither (LUMI).
BUILDERS = ("fakeroot", "proot")


@dataclass(frozen=True)
class ContainerBuild:
    """Where and how `orchestrator container build NAME --on-cluster` builds: a Slurm job of this profile."""

    partition: str | None = None  # a partition of scheduler.partitions (a CPU one: a build uses no GPU); required
    time: str = "01:00:00"  # the job's time limit
    cpus: int = 8  # --cpus-per-task (mksquashfs compresses in parallel)
    builder: Literal["fakeroot", "proot"] = "fakeroot"
    setup: tuple[str, ...] = ()  # shell lines run in the job before the build (`module load ...`)


@dataclass(frozen=True)
class Container:
    runtime: Literal["apptainer", "singularity"] | None = None  # None: run on the host
    image: str | None = None  # runtime template, e.g. /project/${SLURM_JOB_ACCOUNT}/x.sif
    gpu_flag: str | None = None  # --rocm or --nv
    binds: tuple[str, ...] = ()  # always bound (site libraries, file systems)
    setup: tuple[str, ...] = ()  # shell lines run inside the container first
    push_host: str | None = None  # [user@]host that `container build --push` copies the image to
    build: ContainerBuild | None = None  # None: no `container build --on-cluster` with this profile


# The ${NAME}s a login section's root may use: the first two are the remote user's (filled
# in over ssh), the account is params.yaml's (login.root is a path on the login node, not
# in a job, so the job's other variables mean nothing there).
LOGIN_ROOT_VARIABLES = ("USER", "HOME", "SLURM_JOB_ACCOUNT")


@dataclass(frozen=True)
class Login:
    """The cluster's login node, for running the job commands from a workstation
    (``orchestrator submit --remote``; see :mod:`orchestrator.remote`)."""

    # An ssh destination ([user@]host) or an alias of your ~/.ssh/config; params.yaml's
    # orchestrator.login_host overrides it. None: no remote use of this profile.
    host: str | None = None
    # The folder that holds the projects sent there: each lands in <root>/<its folder name>.
    # Relative: to the remote home. May use ${USER}, ${HOME} and ${SLURM_JOB_ACCOUNT}.
    root: str = "${HOME}/orchestrator-projects"
    # Shell lines run on the login node before each remote command, in bash -l (a login
    # shell: module is defined): `module load ...`, `source ~/venv/bin/activate`.
    setup: tuple[str, ...] = ()


@dataclass(frozen=True)
class Environment:
    variables: dict[str, str] = field(default_factory=dict)  # name -> runtime template
    node_local_dirs: tuple[str, ...] = ()  # variables naming directories made on each node
    unset: tuple[str, ...] = ()  # removed before launch, besides the leaked container ones
    master_addr_suffix: str = ""  # JUWELS: the first node's name + "i" is its InfiniBand address


@dataclass(frozen=True)
class Storage:
    workdir_root: str | None = None  # fast storage for the job's working dir (runtime template)
    # True when workdir_root is a disk of each node (a job's inputs are copied to every
    # node), False for a file system all nodes share (copied once, by the batch script).
    node_local: bool = False
    # torch.compile's caches (Inductor's graphs and kernels, Triton's GPU kernels): on
    # each node's own disk, never the home directory (Triton's default, ~/.triton) whose
    # small quota they fill. A runtime template; null leaves torch's defaults.
    compile_cache: str | None = "/tmp/${USER}-torch-compile"


@dataclass(frozen=True)
class Billing:
    """How the site charges a GPU job to the project's budget, in the site's own unit.

    Sites bill one of two ways (see :func:`orchestrator.analysis.billing.cost`):
    whole nodes for as long as the job held them, on partitions that allocate whole
    nodes (LUMI's standard-g, Frontier, JUWELS Booster), or per allocated GPU on
    partitions that share a node (LUMI's small-g). A site may state either rate or both.
    Some sites bill a shared job for more than its GPUs when it holds more cores or
    memory than a GPU's share; that is not modelled (the report's note says so).
    """

    unit: str  # what the budget is counted in: GPU-hours, node-hours, core-hours
    # Units one node-hour costs on the whole-node partitions GPU jobs use.
    per_node_hour: float | None = None
    # Units one GPU-hour costs where the site bills by the GPU; a GPU as the profile's
    # node counts them (on LUMI one GCD, half an MI250X).
    per_gpu_hour: float | None = None
    source: str = ""  # where the rates come from: a URL and what it says (printed in the report)

    def hourly(self, nodes: int, gpus: int, whole_node: bool) -> float | None:
        """Units one hour of this allocation costs: every node on a whole-node partition, else
        its GPUs; None when the rate that applies is not stated (never the other rate instead)."""
        if whole_node:
            return None if self.per_node_hour is None else nodes * self.per_node_hour
        return None if self.per_gpu_hour is None else gpus * self.per_gpu_hour


@dataclass(frozen=True)
class Site:
    """The site's figures: its power, for emissions = energy x PUE x carbon intensity,
    and how it bills compute, for a run's cost in the site's units.

    PUE and carbon intensity are the site's published or assumed figures (``source``
    says which); ``orchestrator report --pue/--carbon-intensity`` override them.
    Unset: the report shows emissions (and cost) as missing rather than guessing.
    """

    pue: float | None = None  # power usage effectiveness: facility energy / IT energy, >= 1
    carbon_intensity_g_per_kwh: float | None = None  # grams CO2e per kWh the site draws
    source: str | None = None  # where the two numbers come from (printed in the report)
    billing: Billing | None = None


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    scheduler: Scheduler
    node: Node
    container: Container = Container()
    environment: Environment = Environment()
    storage: Storage = Storage()
    site: Site = Site()
    login: Login = Login()

    @property
    def uses_slurm(self) -> bool:
        return self.scheduler.kind == "slurm"

    @property
    def requeue_signal_name(self) -> str | None:
        """The bare signal name tasks trap (``USR1`` for ``SIGUSR1@90``)."""
        m = _SIGNAL.fullmatch(self.scheduler.requeue_signal or "")
        return m.group(2) if m else None


@dataclass(frozen=True)
class LoadedProfile:
    """A profile together with where it came from (for headers and provenance)."""

    profile: Profile
    source: str  # "built-in" or the path it was read from
    text: str  # the YAML text, for `clusters show --format yaml`
    # What a profile without a scheduler found on the machine it runs on (see
    # selection.machine_profile); None for Slurm profiles, whose file describes the nodes.
    machine: Machine | None = None

    @property
    def name(self) -> str:
        return self.profile.name


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))


def load(name_or_path: str) -> LoadedProfile:
    """Load a built-in profile by name, or a profile file by path."""
    path = Path(name_or_path)
    looks_like_path = path.suffix in (".yaml", ".yml") or "/" in name_or_path or _stat(path) is not None
    hints = [
        f"built-in profiles: {', '.join(builtin_names())}",
        "or pass the path to a profile file (see `orchestrator clusters show NAME --format yaml`)",
    ]
    if looks_like_path:
        return _load_file(path, source=str(path), hints=hints)
    builtin = BUILTIN_DIR / f"{name_or_path}.yaml"
    if name_or_path not in builtin_names():
        shown = repr(name_or_path) if len(name_or_path) <= 80 else f"{name_or_path[:80]!r}... ({len(name_or_path)} characters)"
        raise ProfileError(f"unknown cluster {shown}", hints=hints)
    return _load_file(builtin, source="built-in")


# A profile is a few kilobytes of YAML; more is some other file (and /dev/zero never ends).
_MAX_PROFILE_BYTES = 1 << 20


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except (OSError, ValueError):  # missing, unreachable, a name too long, a NUL in it
        return None


def _read_profile(path: Path, hints: list[str]) -> str:
    """The text of a profile file, or one ProfileError saying what ``path`` is instead."""
    where = f"profile file {str(path)!r}"
    try:
        return files.read_text(path, _MAX_PROFILE_BYTES, follow_symlinks=True)  # a path the user typed may be a link
    except UnreadableFile as exc:
        if exc.kind in ("missing", "unreadable"):
            raise ProfileError(f"{where} {exc.reason}", hints=hints) from None
        if exc.kind == "folder":
            raise ProfileError(f"{where} is a folder; --cluster takes a profile file (YAML) or a built-in name", hints=hints) from None
        if exc.kind == "too-large":
            raise ProfileError(f"{where} {exc.reason}: not a profile (a profile is a small YAML file)") from None
        raise ProfileError(f"{where} {exc.reason}; give a profile file (YAML)", hints=hints if exc.kind != "not-text" else ()) from None


def _load_file(path: Path, source: str, hints: Sequence[str] = ()) -> LoadedProfile:
    text = _read_profile(path, list(hints))
    try:
        data = yamlio.load_text(text, str(path))
    except ConfigError as exc:
        raise ProfileError(f"profile {exc.headline}", exc.problems) from exc
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: a profile is a mapping of keys (name, scheduler, node, ...)")
    try:
        profile = yamlio.structure(data, Profile, f"profile {path}")
    except ConfigError as exc:
        raise ProfileError(exc.headline, exc.problems) from exc
    found = problems(profile)
    if found:
        raise ProfileError(f"profile {path} is invalid", found)
    return LoadedProfile(profile, source, text)


def problems(p: Profile) -> list[str]:
    """Everything wrong with a profile's meaning (its shape is checked by structuring)."""
    found: list[str] = []
    s, n = p.scheduler, p.node
    try:
        re.compile(s.account_pattern)
    except re.error as exc:
        found.append(f"scheduler.account_pattern {s.account_pattern!r} is not a regular expression: {exc}")
    if s.kind == "slurm":
        if s.launcher == "local":
            found.append("scheduler.launcher: 'local' is for profiles without Slurm (kind: none); use sbatch or srun")
        if not s.partitions:
            found.append("scheduler.partitions: a Slurm profile needs at least one partition")
        if s.default_partition not in s.partitions:
            found.append(f"scheduler.default_partition {s.default_partition!r} is not one of: {', '.join(s.partitions) or '(none)'}")
        if s.cpu_partition is not None and s.cpu_partition not in s.partitions:
            found.append(f"scheduler.cpu_partition {s.cpu_partition!r} is not one of: {', '.join(s.partitions) or '(none)'}")
    else:
        if s.launcher != "local":
            found.append(f"scheduler.launcher: a profile without Slurm (kind: none) runs jobs locally; use 'local', not {s.launcher!r}")
        if s.cpu_partition is not None:
            found.append("scheduler.cpu_partition: a profile without Slurm (kind: none) has no partitions; leave it out")
    for what, value in (
        [("scheduler.default_time", s.default_time)]
        + [(f"scheduler.partitions.{k}.max_time", v.max_time) for k, v in s.partitions.items()]
        + [
            (f"scheduler.partitions.{k}.max_time_by_nodes.{size}", t)
            for k, v in s.partitions.items()
            for size, t in v.max_time_by_nodes.items()
        ]
    ):
        if why := times.problem(value):
            found.append(f"{what}: {why}")
    if s.requeue_signal is not None and not _SIGNAL.fullmatch(s.requeue_signal):
        found.append(
            f"scheduler.requeue_signal {s.requeue_signal!r}: expected SIGNAL@SECONDS such as USR1@90 (every task gets it, so no B:)"
        )
    if s.max_requeues < 0:
        found.append("scheduler.max_requeues must be 0 or more")
    if s.node_fault_retries < 0:
        found.append("scheduler.node_fault_retries must be 0 or more")
    if not s.retry_backoff_s >= 0:
        found.append("scheduler.retry_backoff_s must be 0 or more seconds")
    if not 0 < s.stuck_timeout_s < float("inf"):
        found.append("scheduler.stuck_timeout_s must be a positive number of seconds")
    found += [problem for option in s.extra_options if (problem := _extra_option_problem(option))]
    if s.service_partition is not None and not patterns.DIRECTIVE_SAFE.fullmatch(s.service_partition):
        found.append(f"scheduler.service_partition {s.service_partition!r} has characters Slurm directives cannot carry")
    for key, part in s.partitions.items():
        for what, name in [("name", key), ("qos", part.qos), ("constraint", part.constraint), ("slurm_partition", part.slurm_partition)]:
            if name is not None and not patterns.DIRECTIVE_SAFE.fullmatch(name):
                found.append(f"scheduler.partitions.{key}: {what} {name!r} has characters Slurm directives cannot carry")
        if part.max_nodes < 1:
            found.append(f"scheduler.partitions.{key}.max_nodes must be at least 1")
        for size in part.max_time_by_nodes:
            if not 1 <= size < part.max_nodes:
                found.append(
                    f"scheduler.partitions.{key}.max_time_by_nodes: {size} nodes is not a size below the partition's "
                    f"max_nodes {part.max_nodes} (keys: the largest node count each time limit holds for)"
                )
        if part.cpus_per_node is not None and part.cpus_per_node < 1:
            found.append(f"scheduler.partitions.{key}.cpus_per_node must be at least 1 (leave it out for the profile's node)")
        found += _memory_problems(key, part, n)
    found += _node_problems(n)
    found += _environment_problems(p)
    found += build_problems(p)
    found += _site_problems(p)
    return found


# A Slurm memory size: a whole number with an optional unit (Slurm's default unit is M).
_MEMORY = re.compile(r"([1-9][0-9]{0,8})([KMGT]?)")
_MEMORY_GB = {"K": 1 / 1024**2, "M": 1 / 1024, "": 1 / 1024, "G": 1, "T": 1024}


def memory_gb(size: str) -> float:
    """A size as Slurm reads it (``60G``, ``491520M``, ``491520``: megabytes), in GiB."""
    m = _MEMORY.fullmatch(size)
    if m is None:
        raise ValueError(size)
    return int(m.group(1)) * _MEMORY_GB[m.group(2)]


def _memory_problems(key: str, part: Partition, n: Node) -> list[str]:
    """A partition's memory request: a Slurm size, one of the two, within what a node has."""
    found: list[str] = []
    where = f"scheduler.partitions.{key}"
    for what, size in (("mem_per_gpu", part.mem_per_gpu), ("mem", part.mem)):
        if size is not None and not _MEMORY.fullmatch(size):
            found.append(
                f"{where}.{what} {size!r}: expected a Slurm memory size, a whole number with K, M, G or T (such as 60G or 491520M)"
            )
    if found:
        return found
    if part.mem_per_gpu is not None and part.mem is not None:
        found.append(
            f"{where}: give mem_per_gpu (partitions that share nodes) or mem (whole nodes), not both: Slurm refuses the two together"
        )
    if part.mem_per_gpu is not None and part.cpus_per_node is not None:
        found.append(f"{where}.mem_per_gpu: the partition's nodes are not the profile's GPU nodes (it has cpus_per_node); give mem instead")
    elif part.mem_per_gpu is not None and not n.gpus:
        found.append(f"{where}.mem_per_gpu: the profile's nodes have no GPU (node.gpus 0); give mem instead")
    node_gb = n.memory_gb if part.cpus_per_node is None else None  # another node type's memory is not stated
    if node_gb is not None:
        per_node = memory_gb(part.mem_per_gpu) * n.gpus if part.mem_per_gpu is not None else memory_gb(part.mem) if part.mem else 0
        if per_node > node_gb:
            found.append(f"{where}: asks {per_node:g} GiB per node, more than the node's {node_gb:g} GB (node.memory_gb)")
    return found


def _site_problems(p: Profile) -> list[str]:
    """The figures energy, emissions and MFU are computed from: the site's and the device's."""
    found: list[str] = []
    if p.site.pue is not None and not p.site.pue >= 1:
        found.append(f"site.pue {p.site.pue:g}: a PUE is facility energy / IT energy, so at least 1")
    if p.site.carbon_intensity_g_per_kwh is not None and not p.site.carbon_intensity_g_per_kwh >= 0:
        found.append(f"site.carbon_intensity_g_per_kwh {p.site.carbon_intensity_g_per_kwh:g}: must be 0 or more")
    found += _billing_problems(p.site.billing)
    gpu = p.node.gpu
    if gpu is not None and gpu.power_w is not None and not gpu.power_w > 0:
        found.append(f"node.gpu.power_w {gpu.power_w:g}: must be more than 0 (leave it out when unknown)")
    if gpu is not None and gpu.peak_tflops_bf16 is not None and not gpu.peak_tflops_bf16 > 0:
        found.append(f"node.gpu.peak_tflops_bf16 {gpu.peak_tflops_bf16:g}: must be more than 0 (leave it out when unknown)")
    return found


def _billing_problems(b: Billing | None) -> list[str]:
    if b is None:
        return []
    found: list[str] = []
    if not b.unit.strip():
        found.append("site.billing.unit is empty: name the unit the site bills in, such as GPU-hours, node-hours or core-hours")
    if not b.source.strip():
        found.append("site.billing.source is empty: say where the rates come from (the site's billing page, its URL)")
    if b.per_node_hour is None and b.per_gpu_hour is None:
        found.append(
            "site.billing: no rate; give per_node_hour (units per node-hour on whole-node partitions), "
            "per_gpu_hour (units per GPU-hour where the site bills by the GPU), or both"
        )
    for key, rate in (("per_node_hour", b.per_node_hour), ("per_gpu_hour", b.per_gpu_hour)):
        if rate is not None and not 0 < rate < float("inf"):
            found.append(f"site.billing.{key} {rate:g}: must be a finite number more than 0 (leave it out where the site does not bill so)")
    return found


def _node_problems(n: Node) -> list[str]:
    found: list[str] = []
    if n.cores < 1 or n.threads_per_core < 1 or n.gpus < 0:
        found.append("node: cores and threads_per_core must be at least 1, gpus at least 0")
    if n.processes_on == "gpu" and not n.gpus:
        found.append("node.processes_on is gpu, but node.gpus is 0: give the GPUs per node, or processes_on: cpu")
        return found
    try:
        reserved = n.reserved
    except ValueError as exc:
        return [f"node.reserved_cores: {exc}"]
    if any(c >= n.cores for c in reserved):
        found.append(f"node.reserved_cores {n.reserved_cores!r} names cores beyond the node's {n.cores}")
    if n.cpu_masks is not None:
        if len(n.cpu_masks) != n.gpus:
            found.append(f"node.cpu_masks: {len(n.cpu_masks)} mask(s) for {n.gpus} GPU(s); give one mask per GPU (= per task)")
        for i, m in enumerate(n.cpu_masks):
            try:
                binding.cores_of(m)
            except ValueError as exc:
                found.append(f"node.cpu_masks[{i}]: {exc}")
    elif n.gpus:
        if len(n.gpu_cores) != n.gpus:
            found.append(
                f"node.gpu_cores: {len(n.gpu_cores)} entr(ies) for {n.gpus} GPU(s); list the closest cores of every GPU, or give cpu_masks"
            )
        for i, c in enumerate(n.gpu_cores):
            try:
                cores = binding.parse_cpulist(c)
            except ValueError as exc:
                found.append(f"node.gpu_cores[{i}]: {exc}")
                continue
            if any(x >= n.cores for x in cores):
                found.append(f"node.gpu_cores[{i}] {c!r} names cores beyond the node's {n.cores}")
    return found


def _environment_problems(p: Profile) -> list[str]:
    e = p.environment
    found: list[str] = []
    for name in [*e.variables, *e.node_local_dirs, *e.unset]:
        if not patterns.ENV_NAME.fullmatch(name):
            found.append(f"environment: {name!r} is not a valid variable name")
    for name in e.node_local_dirs:
        if name not in e.variables:
            found.append(f"environment.node_local_dirs: {name} is not set under environment.variables")
    templates: list[tuple[str, str | None]] = [(f"environment.variables.{k}", v) for k, v in e.variables.items()]
    templates += [("container.image", p.container.image), ("storage.workdir_root", p.storage.workdir_root)]
    templates += [("storage.compile_cache", p.storage.compile_cache)]
    templates += [(f"container.binds[{i}]", b) for i, b in enumerate(p.container.binds)]
    for what, value in templates:
        if value is not None:
            found += [f"{what}: {msg}" for msg in patterns.runtime_problems(value)]
    if p.container.push_host is not None and not re.fullmatch(r"([A-Za-z0-9._-]+@)?[A-Za-z0-9._-]+", p.container.push_host):
        found.append(f"container.push_host {p.container.push_host!r}: expected [user@]host (an alias from your ssh config works)")
    found += _login_problems(p.login)
    if p.container.image and not p.container.runtime:
        found.append("container.image is set but container.runtime is not (apptainer or singularity)")
    for name in e.variables:
        if _SECRET_NAME.search(name):
            found.append(
                f"environment.variables.{name}: looks like a secret, and a profile's values are written into every script: list it in "
                "params.yaml's orchestrator.secrets instead (passed by name)"
            )
    if e.master_addr_suffix and not re.fullmatch(r"[A-Za-z0-9.-]+", e.master_addr_suffix):
        found.append(f"environment.master_addr_suffix {e.master_addr_suffix!r}: expected host name characters (letters, digits, '.', '-')")
    if p.container.gpu_flag not in (None, "--nv", "--rocm"):
        found.append(f"container.gpu_flag {p.container.gpu_flag!r}: expected --nv or --rocm")
    return found


def build_problems(p: Profile) -> list[str]:
    """What is wrong with container.build, one line per key (see :class:`ContainerBuild`)."""
    b = p.container.build
    if b is None:
        return []
    found: list[str] = []
    parts = p.scheduler.partitions
    if p.scheduler.kind != "slurm":
        found.append("container.build: builds run as Slurm jobs, and this profile has no Slurm (scheduler.kind: none); leave it out")
    elif b.partition is None:
        found.append(f"container.build.partition is not set: name the partition build jobs run in, one of: {', '.join(parts)}")
    elif b.partition not in parts:
        found.append(f"container.build.partition {b.partition!r} is not one of: {', '.join(parts) or '(none)'}")
    if why := times.problem(b.time):
        found.append(f"container.build.time: {why}")
    if b.cpus < 1:
        found.append(f"container.build.cpus {b.cpus}: must be at least 1")
    if not p.container.runtime:
        found.append("container.build is set but container.runtime is not (apptainer or singularity)")
    elif b.builder == "proot" and p.container.runtime != "singularity":
        found.append("container.build.builder proot is SingularityCE's unprivileged build: it needs container.runtime singularity")
    if not p.container.image:
        found.append("container.build is set but container.image is not: the build puts the image where the jobs read it")
    for i, line in enumerate(b.setup):
        if not line.strip() or "\n" in line:
            found.append(f"container.build.setup[{i}] {line!r}: give one non-empty shell line per entry")
    return found


def _login_problems(login: Login) -> list[str]:
    found: list[str] = []
    if login.host is not None and not HOST_PATTERN.fullmatch(login.host):
        found.append(f"login.host {login.host!r}: expected [user@]host (an alias from your ssh config works)")
    if not login.root.strip() or any(ord(c) < 32 for c in login.root):
        found.append(f"login.root {login.root!r}: give a folder on the login node (absolute, or relative to the remote home)")
    found += [f"login.root: {msg}" for msg in patterns.runtime_problems(login.root)]
    unknown = sorted(set(patterns.RUNTIME_REF.findall(login.root)) - set(LOGIN_ROOT_VARIABLES))
    if unknown:
        found.append(f"login.root uses ${{{unknown[0]}}}; it may use only {', '.join('${' + v + '}' for v in LOGIN_ROOT_VARIABLES)}")
    return found


# An ssh destination as a profile or params.yaml writes it: [user@]host, no options, no spaces.
HOST_PATTERN = re.compile(r"([A-Za-z0-9._-]+@)?[A-Za-z0-9_][A-Za-z0-9._-]*")
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|CREDENTIAL", re.IGNORECASE)
