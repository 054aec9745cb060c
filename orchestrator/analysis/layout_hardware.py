"""The GPUs a layout is planned for: the values given, else the cluster profile's, else the
documented defaults (bandwidths only), and where each value came from.

The arithmetic on them is :mod:`~orchestrator.analysis.layout`'s; the options that give them are the CLI's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.analysis.layout_costs import DEFAULT_INTER_NODE_GBPS, DEFAULT_INTRA_NODE_GBPS, Hardware
from orchestrator.errors import PlanError

# Without these there is nothing to plan: no default stands in for them.
REQUIRED = ("gpus_per_node", "memory_gb")


@dataclass(frozen=True)
class Chosen:
    hardware: Hardware | None  # None while something in ``missing``
    sources: dict[str, str]  # field -> "option", "profile NAME" or "default"
    missing: tuple[str, ...]  # fields of REQUIRED that neither the values given nor the profile have


def choose(gpus: int, cluster: str | None, given: Mapping[str, float | None]) -> Chosen:
    """``given``: the Hardware fields the user gave (None: not given); ``cluster``: the profile for the rest."""
    values = {k: v for k, v in given.items() if v is not None}
    sources = {k: "option" for k in values}
    if cluster is not None:
        for key, value in profile_facts(cluster).items():
            if key not in values and value is not None:
                values[key], sources[key] = value, f"profile {cluster}"
    missing = tuple(key for key in REQUIRED if key not in values)
    if missing:
        return Chosen(None, sources, missing)
    for key, default in (("intra_node_gbps", DEFAULT_INTRA_NODE_GBPS), ("inter_node_gbps", DEFAULT_INTER_NODE_GBPS)):
        if key not in values:
            values[key], sources[key] = default, "default"
    return Chosen(Hardware(gpus=gpus, **values), sources, ())  # type: ignore[arg-type]


def profile_facts(cluster: str) -> dict[str, float | None]:
    """What the profile ``cluster`` says of its GPUs; one error when it has none."""
    from orchestrator.config import profile

    loaded = profile.load(cluster)
    node = loaded.profile.node
    if not node.gpus or node.gpu is None:
        raise PlanError(
            f"cluster {loaded.name} has no GPUs in its profile", hints=["give --gpus-per-node and --gpu-memory-gb instead of --cluster"]
        )
    return {
        "gpus_per_node": node.gpus,
        "memory_gb": node.gpu.memory_gb,
        "peak_tflops": node.gpu.peak_tflops_bf16,
        # Optional in a profile: None falls back to the flag, else the documented default.
        "intra_node_gbps": node.intra_node_gbps,
        "inter_node_gbps": node.inter_node_gbps,
    }
