"""Scaling arithmetic: speedup and efficiency against the smallest configuration, weak or strong.

Runs are grouped into *series*: the runs of one stage whose folders differ only
in the ``<nodes>x<gpus>`` component (``results/benchmark/<dataset>/<model>/2x8``),
i.e. the same workload on different GPU counts. Within a series, with T the
throughput (``tokens_per_second``, else ``samples_per_second``), n the GPU count
and b the run with the fewest GPUs that has a throughput (the *baseline*)::

    speedup     S(n) = T(n) / T(b)
    ideal       I(n) = n / n_b
    efficiency  E(n) = S(n) / I(n) = (T(n) / n) / (T(b) / n_b)

Whether that is strong or weak scaling is read from the metrics: a global batch
(``global_batch_size``) that stays fixed while the per-device batch
(``batch_size``) shrinks is *strong* scaling (a fixed problem split further;
E = t(b) n_b / (t(n) n), the classic parallel efficiency); a per-device batch that
stays fixed while the global batch grows with n is *weak* scaling (work per GPU
fixed; E = step_time(b) / step_time(n), the same number, since T = batch x n /
step_time). Anything else is *mixed*: E is then only throughput per device
relative to the baseline.

Pure: no files, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.analysis.mfu import number

THROUGHPUTS = (("tokens_per_second", "tokens/s"), ("samples_per_second", "samples/s"))
Mode = Literal["weak", "strong", "mixed", "single"]


def throughput_of(metrics: Mapping[str, Any]) -> tuple[float | None, str | None]:
    for key, unit in THROUGHPUTS:
        value = number(metrics.get(key))
        if value is not None and value > 0:
            return value, unit
    return None, None


@dataclass(frozen=True)
class ScalingPoint:
    """One configuration as the scaling arithmetic sees it."""

    gpus: int
    throughput: float | None  # None: missing
    batch_per_device: float | None = None
    global_batch: float | None = None


@dataclass(frozen=True)
class Scaled:
    speedup: float | None
    ideal: float | None
    efficiency: float | None


def baseline_index(points: Sequence[ScalingPoint]) -> int | None:
    """The point with the fewest GPUs that has a throughput (the first of equals)."""
    present = [i for i, p in enumerate(points) if p.throughput is not None and p.gpus >= 1]
    return min(present, key=lambda i: points[i].gpus) if present else None


def scale(points: Sequence[ScalingPoint]) -> list[Scaled]:
    """Speedup, ideal speedup and efficiency of each point against the baseline; None where missing."""
    b = baseline_index(points)
    if b is None:
        return [Scaled(None, None, None) for _ in points]
    base = points[b]
    assert base.throughput is not None  # baseline_index chose it for having one
    out = []
    for p in points:
        if p.throughput is None or p.gpus < 1:
            out.append(Scaled(None, None, None))
            continue
        speedup = p.throughput / base.throughput
        ideal = p.gpus / base.gpus
        out.append(Scaled(speedup, ideal, speedup / ideal))
    return out


def scaling_mode(points: Sequence[ScalingPoint]) -> Mode:
    """Weak, strong or mixed scaling, read from the batch sizes of the points with a throughput."""
    present = [p for p in points if p.throughput is not None and p.gpus >= 1]
    if len({p.gpus for p in present}) < 2:
        return "single"
    per_device = {p.batch_per_device for p in present}
    global_ = {p.global_batch for p in present}
    if None in per_device or None in global_:
        return "mixed"
    if len(per_device) == 1 and len(global_) > 1:
        return "weak"
    if len(global_) == 1 and len(per_device) > 1:
        return "strong"
    return "mixed"
