"""The shape of a cluster profile: frozen dataclasses, each key with its default and a comment
saying what it means (the reference docs are generated from them).

Read and checked by :mod:`~orchestrator.config.profile` (:func:`~orchestrator.config.profile.load`),
whose names these are to callers; the checks of meaning: :mod:`~orchestrator.config.profile_checks`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from orchestrator.config import binding
from orchestrator.config.machine import Machine
from orchestrator.util import yamlio

# Variables an outer container leaks into everything started from it (a job started
# from a shell inside a container inherits its SINGULARITY_BIND); APPTAINER_BIND even
# overrides SINGULARITY_BIND.
LEAKED_CONTAINER_VARS = tuple(
    f"{prefix}_{name}"
    for prefix in ("APPTAINER", "SINGULARITY")
    for name in ("BIND", "BINDPATH", "CONTAINER", "NAME", "ENVIRONMENT", "COMMAND", "APPNAME")
)
# Each task's place in its job, set per task by the script (orchestrator.scripts.ranks) under the
# names torch.distributed, torchrun and the frameworks on them read: never a profile's to set.
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")
# scheduler.requeue_signal: [SIG]NAME@SECONDS, as sbatch --signal takes it without B:
REQUEUE_SIGNAL = re.compile(r"(SIG)?([A-Z0-9]+)@(\d+)")


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
    # Where `orchestrator smoke` sends its short jobs (one per job shape, two minutes each): the
    # site's debug or development queue, which starts a small job within minutes. None: the
    # partition each item's real job would get.
    smoke_partition: str | None = None
    # A job Slurm will not start without someone acting (held, or pending for a reason
    # that never clears by itself) is reported at once; `orchestrator run` gives up
    # waiting for it after this long (the job stays queued: release or cancel it).
    stuck_timeout_s: float = 600.0
    # Options every job of the site carries that the plan does not derive (Frontier's
    # `--network=disable_rdzv_get`, which its RCCL rendezvous variables need): `--name`
    # or `--name=value`, on the #SBATCH lines and srun's command line.
    extra_options: tuple[str, ...] = ()


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
    # Per GPU, one direction, GB/s (nominal; `orchestrator layout`'s communication model):
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
        m = REQUEUE_SIGNAL.fullmatch(self.scheduler.requeue_signal or "")
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
