"""CPU binding: one task per GPU, each bound to the cores closest to its GPU.

Masks are derived from a node's topology (``gpu_cores``: the cores closest to each
GPU, as Linux cpulists such as ``"48-55"``, minus the reserved cores) or taken from
a profile's explicit ``cpu_masks``. Either way they are validated: one mask per
task, no core shared by two tasks, no core the node lacks, no reserved core.

Everything here is pure and works on plain ints (bit masks) and frozensets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def parse_cpulist(text: str) -> frozenset[int]:
    """Parse a Linux cpulist (``"1-7,9"``) into core ids; ValueError if malformed."""
    cores: set[int] = set()
    for part in str(text).replace(" ", "").split(","):
        if not part:
            raise ValueError(f"empty entry in cpulist {text!r}")
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"{part!r} in cpulist {text!r} is not N or N-M")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(f"range {part!r} in cpulist {text!r} runs backwards")
        cores.update(range(first, last + 1))
    return frozenset(cores)


def format_cpulist(cores: frozenset[int] | set[int]) -> str:
    """Format core ids as a compact cpulist (``{1,2,3,9}`` -> ``"1-3,9"``)."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(cores):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(_fmt_run(run))
        run = [c]
    if run:
        out.append(_fmt_run(run))
    return ",".join(out)


def _fmt_run(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def mask_of(cores: frozenset[int]) -> str:
    """Hex mask as Slurm's ``mask_cpu`` and LUMI's documentation write it."""
    return hex(sum(1 << c for c in cores))


def cores_of(mask: str | int) -> frozenset[int]:
    """Core ids named by a hex mask (``"0xfe"`` or an int); ValueError if malformed."""
    if isinstance(mask, bool):
        raise ValueError(f"{mask!r} is not a hex mask")
    value = mask if isinstance(mask, int) else _parse_hex(mask)
    if value < 0:
        raise ValueError(f"{mask!r} is negative")
    return frozenset(i for i in range(value.bit_length()) if value >> i & 1)


def _parse_hex(text: str) -> int:
    s = text.strip().lower()
    if not s.startswith("0x") or len(s) < 3:
        raise ValueError(f"{text!r} is not a hex mask such as 0xfe")
    try:
        return int(s, 16)
    except ValueError:
        raise ValueError(f"{text!r} is not a hex mask such as 0xfe") from None


@dataclass(frozen=True)
class Binding:
    """The CPU binding of the tasks on one node: ``cores[i]`` belongs to task i."""

    cores: tuple[frozenset[int], ...]

    @property
    def masks(self) -> tuple[str, ...]:
        return tuple(mask_of(c) for c in self.cores)

    @property
    def srun_value(self) -> str:
        return "mask_cpu:" + ",".join(self.masks)


def derive(gpu_cores: Sequence[frozenset[int]], reserved: frozenset[int], tasks: int) -> Binding:
    """Masks for ``tasks`` tasks, task i next to GPU i.

    GPUs that list the same closest cores (two GPUs on one socket) split those
    cores evenly in GPU order, so each task still gets cores of its own.
    """
    groups: dict[frozenset[int], list[int]] = {}
    for gpu, cores in enumerate(gpu_cores):
        groups.setdefault(cores, []).append(gpu)
    per_gpu: dict[int, frozenset[int]] = {}
    for cores, gpus in groups.items():
        usable = sorted(cores - reserved)
        share = len(usable) // len(gpus)
        for k, gpu in enumerate(gpus):
            per_gpu[gpu] = frozenset(usable[k * share : (k + 1) * share])
    return Binding(tuple(per_gpu[g] for g in range(min(tasks, len(gpu_cores)))))


def problems(binding: Binding, tasks: int, logical_cpus: int, reserved: frozenset[int]) -> list[str]:
    """Every way ``binding`` is wrong for ``tasks`` tasks on the node described."""
    found: list[str] = []
    if len(binding.cores) != tasks:
        found.append(f"{len(binding.cores)} CPU mask(s) for {tasks} task(s) per node: need exactly one mask per task")
    for task, cores in enumerate(binding.cores):
        if not cores:
            found.append(f"task {task}: empty CPU mask")
        missing = {c for c in cores if c >= logical_cpus}
        if missing:
            found.append(
                f"task {task}: mask {mask_of(cores)} names cores {format_cpulist(missing)} the node lacks (it has 0-{logical_cpus - 1})"
            )
        taken = cores & reserved
        if taken:
            found.append(f"task {task}: mask {mask_of(cores)} names reserved cores {format_cpulist(taken)}")
    for a in range(len(binding.cores)):
        for b in range(a + 1, len(binding.cores)):
            shared = binding.cores[a] & binding.cores[b]
            if shared:
                found.append(f"tasks {a} and {b} share cores {format_cpulist(shared)} ({binding.masks[a]} and {binding.masks[b]})")
    return found
