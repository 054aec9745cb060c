"""Peaks: the FLOP/s that model FLOPs utilisation (MFU) divides by, with where it comes from, and peak memory.

``ORCH_PEAK_TFLOPS`` (a cluster profile sets it) is one device's dense peak in
TFLOP/s at the run's precision, e.g. 989 for an H100 SXM in bf16. Without it, on
CPU an estimate from the CPU's clock and vector unit, said to be one; on a GPU,
none: the MFU is then reported as null rather than computed from a guess.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import torch

ENV = "ORCH_PEAK_TFLOPS"
# fp32 FLOPs per cycle per core: FMA (2 FLOPs) x vector lanes x 2 FMA units, as on
# current x86 server cores; CPUs with one FMA unit reach half, so the MFU is low then.
_CPU_FLOPS_PER_CYCLE = {"AVX512": 2 * 16 * 2, "AVX2": 2 * 8 * 2}


def env_peak() -> float | None:
    """One device's peak from ``ORCH_PEAK_TFLOPS``, in FLOP/s; ValueError if it is not a positive number."""
    text = os.environ.get(ENV)
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ValueError(f"{ENV}={text!r}: must be a positive number of TFLOP/s per device")
    return value * 1e12


def job_peak(accelerator: str, world_size: int, cpus: int) -> tuple[float | None, str]:
    """The whole job's peak FLOP/s, or None, and a line saying where it comes from.

    ``cpus``: the CPUs the job's processes may run on, all nodes together (:func:`job_cpus`).
    """
    per_device = env_peak()
    if per_device is not None:
        return per_device * world_size, f"{ENV}={os.environ[ENV]} per device x {world_size} devices"
    if accelerator == "cpu":
        per_core, how = cpu_core_peak()
        if per_core is not None:
            return per_core * cpus, f"estimate: {cpus} CPUs x {how}"
        return None, f"none: {how}; set {ENV}"
    return None, f"none: set {ENV} to the device's dense peak TFLOP/s at the run's precision"


def cpu_core_peak() -> tuple[float | None, str]:
    """One core's fp32 peak FLOP/s from /proc/cpuinfo's clock and the vector unit torch uses."""
    capability = torch.backends.cpu.get_cpu_capability()
    per_cycle = _CPU_FLOPS_PER_CYCLE.get(capability)
    mhz = _cpu_mhz()
    if per_cycle is None or mhz is None:
        return None, f"no estimate for this CPU (vector unit {capability}, clock {mhz or 'unknown'} MHz)"
    return mhz * 1e6 * per_cycle, f"{mhz:.0f} MHz x {per_cycle} fp32 FLOP/cycle ({capability}, two FMA units assumed)"


def _cpu_mhz() -> float | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":", 1)[1])
    except (OSError, ValueError):
        pass
    return None


def job_cpus(world_size: int) -> int:
    """The CPUs the job's processes may run on, counting a CPU shared by processes of one node once.

    A collective when ``world_size`` > 1: every rank must call it. Local CPU runs
    start their processes on the same CPUs; under Slurm each task has its own.
    """
    mine = (socket.gethostname(), sorted(os.sched_getaffinity(0)))
    if world_size == 1 or not torch.distributed.is_initialized():
        return len(mine[1])
    everyone: list = [None] * world_size
    torch.distributed.all_gather_object(everyone, mine)
    per_host: dict[str, set[int]] = {}
    for host, cpus in everyone:
        per_host.setdefault(host, set()).update(cpus)
    return sum(map(len, per_host.values()))


def allocator_retries(device: torch.device) -> int | None:
    """How often this process's CUDA allocator had to free its cache and try again (each a device-wide sync); None off GPU."""
    if device.type != "cuda":
        return None
    return int(torch.cuda.memory_stats(device).get("num_alloc_retries", 0))


def peak_memory_bytes(device: torch.device) -> int:
    """This process's peak: memory allocated on its GPU, or on CPU its maximum resident set size."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
