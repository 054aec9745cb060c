"""The run's results file, ``metrics.json``: what DVC's ``metrics`` reads."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def write(path: Path, metrics: Mapping[str, Any]) -> None:
    """Write atomically: a reader (DVC, a report, a requeued job) sees the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Named by pid rather than mkstemp: mkstemp's 0600 mode would hide the results
    # from the rest of a cluster project's group; open() honours the umask.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            json.dump(dict(metrics), f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def throughput(unit: str, per_second: float, flops_per_unit: float, world_size: int, peak: tuple[float | None, str]) -> dict[str, Any]:
    """A run's speed and model FLOPs utilisation, keyed by ``unit`` (``token``: tokens_per_second, flops_per_token, ...).

    ``per_second``: units of the whole job per second; ``peak``: the job's peak
    FLOP/s and where it comes from (experiments.common.peak.job_peak). MFU is None when
    there is no peak to divide by, never a guess.
    """
    job_peak, source = peak
    achieved = per_second * flops_per_unit
    return {
        f"{unit}s_per_second": per_second,
        f"{unit}s_per_second_per_device": per_second / world_size,
        f"flops_per_{unit}": flops_per_unit,
        "model_tflops_per_device": achieved / world_size / 1e12,
        "mfu": achieved / job_peak if job_peak else None,
        "mfu_peak_source": source,
        "peak_tflops_per_device": job_peak / world_size / 1e12 if job_peak else None,
    }
