"""Human-readable description of a profile: scheduler, topology, derived binding."""

from __future__ import annotations

from orchestrator.config import binding
from orchestrator.config.profile_schema import LoadedProfile


def describe(loaded: LoadedProfile) -> str:
    p = loaded.profile
    s, n, c = p.scheduler, p.node, p.container
    lines = [f"{p.name}: {p.description}", f"  source: {loaded.source}", ""]
    if p.uses_slurm:
        lines.append(
            f"scheduler: slurm (launcher {s.launcher}), account {s.account_pattern!r}"
            + (f", e.g. {s.account_example}" if s.account_example else "")
        )
        lines.append(
            f"  default partition {s.default_partition}, default time {s.default_time}, requeue signal {s.requeue_signal or 'none'}"
        )
        for name, part in s.partitions.items():
            extra = ", whole nodes" if part.whole_node else ""
            extra += f", Slurm partition {part.slurm_partition}" if part.slurm_partition else ""
            extra += f", QOS {part.qos}" if part.qos else ""
            extra += "" if part.automatic else ", only when named"
            lines.append(f"  partition {name}: up to {part.max_nodes} nodes, {part.time_rule()}{extra}")
        if s.extra_options:
            lines.append(f"  every job: {' '.join(s.extra_options)}")
    else:
        lines.append("scheduler: none (jobs run on this machine)")
    lines.append("")
    smt = f" x {n.threads_per_core} threads" if n.threads_per_core > 1 else ""
    reserved = f", reserved {n.reserved_cores}" if n.reserved_cores else ""
    lines.append(f"node: {n.cores} cores{smt}{reserved}, {n.gpus} GPU(s)" + (f" ({n.gpu.model}, {n.gpu.memory_gb:g} GB)" if n.gpu else ""))
    if n.gpus:
        full = n.binding(n.gpus)
        how = "explicit cpu_masks" if n.cpu_masks is not None else "derived: closest cores minus reserved"
        lines.append(f"binding, one task per GPU ({how}):")
        lines.append(f"  {'task/GPU':<9} {'closest cores':<14} {'bound cores':<12} mask")
        for i, cores in enumerate(full.cores):
            closest = n.gpu_cores[i] if i < len(n.gpu_cores) else "-"
            lines.append(f"  {i:<9} {closest:<14} {binding.format_cpulist(cores) or '-':<12} {binding.mask_of(cores)}")
        lines.append(f"  srun --cpu-bind={full.srun_value}")
        problems = binding.problems(full, n.gpus, n.logical_cpus, n.reserved)
        lines += [f"  PROBLEM: {msg}" for msg in problems]
    lines.append("")
    if c.runtime:
        lines.append(f"container: {c.runtime} exec {c.gpu_flag or ''} {c.image or '(no image)'}".replace("  ", " "))
        if c.binds:
            lines.append(f"  binds: {', '.join(c.binds)}")
        if c.setup:
            lines.append(f"  setup: {'; '.join(c.setup)}")
    else:
        lines.append("container: none (commands run on the host)")
    e = p.environment
    if e.variables:
        lines.append("environment (per task):")
        lines += [f"  {k}={v}" for k, v in sorted(e.variables.items())]
    if p.storage.workdir_root:
        lines.append(f"fast working dir: {p.storage.workdir_root}/<item>")
    return "\n".join(lines)
