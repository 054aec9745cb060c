"""What a profile's values mean together: :func:`problems` lists everything wrong with a
profile that its shape (the dataclasses of :mod:`~orchestrator.config.profile_schema`) lets
through: partitions that do not exist, times and memory that do not parse, CPU masks that do
not fit the node, an extra sbatch option the orchestrator sets itself, a login root with
values the login node cannot know.
"""

from __future__ import annotations

import re

from orchestrator.config import binding
from orchestrator.config.profile_schema import (
    LOGIN_ROOT_VARIABLES,
    RANK_VARIABLES,
    REQUEUE_SIGNAL,
    Billing,
    Login,
    Node,
    Partition,
    Profile,
)
from orchestrator.slurm import requests, times
from orchestrator.util import patterns

# The options the orchestrator sets itself (slurm.requests): a profile's extra_options may not set
# them a second time.
PLANNED_OPTIONS = requests.PLANNED_OPTIONS
_SHORT_OPTIONS = {short: long for short, long in requests.SHORT_OPTIONS.items() if long in PLANNED_OPTIONS}
_OPTION = requests.OPTION
_planned = requests.planned


def extra_option_problem(option: str) -> str | None:
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
        if s.smoke_partition is not None and s.smoke_partition not in s.partitions:
            found.append(f"scheduler.smoke_partition {s.smoke_partition!r} is not one of: {', '.join(s.partitions) or '(none)'}")
    else:
        if s.launcher != "local":
            found.append(f"scheduler.launcher: a profile without Slurm (kind: none) runs jobs locally; use 'local', not {s.launcher!r}")
        if s.cpu_partition is not None:
            found.append("scheduler.cpu_partition: a profile without Slurm (kind: none) has no partitions; leave it out")
        if s.smoke_partition is not None:
            found.append("scheduler.smoke_partition: a profile without Slurm (kind: none) has no partitions; leave it out")
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
    if s.requeue_signal is not None and not REQUEUE_SIGNAL.fullmatch(s.requeue_signal):
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
    found += [problem for option in s.extra_options if (problem := extra_option_problem(option))]
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


_MEMORY = requests.MEMORY
memory_gb = requests.memory_gb


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
    for name in e.variables:
        if name in RANK_VARIABLES:
            found.append(
                f"environment.variables.{name}: set by the orchestrator in every task, from Slurm's own variables "
                f"({', '.join(RANK_VARIABLES)}; docs/reference/ranks.md): leave it out"
                + (" (rank 0's address on another network: environment.master_addr_suffix)" if name == "MASTER_ADDR" else "")
            )
    if e.master_addr_suffix and not re.fullmatch(r"[A-Za-z0-9.-]+", e.master_addr_suffix):
        found.append(f"environment.master_addr_suffix {e.master_addr_suffix!r}: expected host name characters (letters, digits, '.', '-')")
    if p.container.gpu_flag not in (None, "--nv", "--rocm"):
        found.append(f"container.gpu_flag {p.container.gpu_flag!r}: expected --nv or --rocm")
    return found


def build_problems(p: Profile) -> list[str]:
    """What is wrong with container.build, one line per key (see :class:`~orchestrator.config.profile_schema.ContainerBuild`)."""
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
