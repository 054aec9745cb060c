"""Model FLOPs utilisation: a run's model FLOP/s per device against a peak.

Read from whichever form the run's metrics carry, by the report and by
``status`` alike, so the two never show different figures for one run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def model_flops_per_device(metrics: Mapping[str, Any]) -> float | None:
    """Model FLOP/s per device, from whichever form the run wrote."""
    world = number(metrics.get("world_size")) or 1.0
    if (v := number(metrics.get("model_flops_per_second"))) is not None:
        return v / world
    if (v := number(metrics.get("model_tflops_per_device"))) is not None:
        return v * 1e12
    tokens, per_token = number(metrics.get("tokens_per_second")), number(metrics.get("flops_per_token"))
    if tokens is not None and per_token is not None:
        return tokens * per_token / world
    mfu, peak = number(metrics.get("mfu")), number(metrics.get("peak_tflops_per_device"))
    if mfu is not None and peak is not None:
        return mfu * peak * 1e12
    return None


def mfu(metrics: Mapping[str, Any], peak_tflops: float | None, profile_name: str) -> tuple[float | None, str]:
    """MFU against the profile's peak, else the run's own, else None; and what it is relative to."""
    flops = model_flops_per_device(metrics)
    if flops is not None and peak_tflops:
        return flops / (peak_tflops * 1e12), f"against {profile_name}'s peak {peak_tflops:g} TFLOP/s per device"
    own = number(metrics.get("mfu"))
    if own is not None:
        return own, f"the run's own ({metrics.get('mfu_peak_source') or 'its own peak'}); {profile_name} gives no peak"
    if flops is not None:
        return None, f"{profile_name} gives no peak (node.gpu.peak_tflops_bf16)"
    return None, "the metrics carry no model FLOPs"
