"""What a job is billed for and does not use: the warnings of ``render`` and ``submit``.

On a partition that allocates whole nodes (JUWELS Booster's, LUMI's standard-g, Frontier's)
the site bills every GPU of the job's nodes, whatever the job uses: a 1-GPU item on a Booster
node pays for its 4. The warning gives both figures and the shapes that would not waste: all
the GPUs of the nodes paid for, fewer nodes, or a partition that bills by the GPU (LUMI's
small-g). Said only where the profile states how the site bills (``site.billing``): without it
nothing is known to be billed. A CPU job on GPU nodes has a note of its own
(:func:`~orchestrator.scripts.plan_checks.cpu_job_notes`).

A warning, never a problem: the job is valid, perhaps on purpose (a GPU's memory-bound item
that needs the node's memory). :func:`grouped` says each warning once for all the items it
concerns, so a matrix of a thousand items gives a line, not a thousand.
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.config.profile_schema import Partition, Profile
from orchestrator.scripts import partitions


def waste(p: Profile, nodes: int, gpus_per_node: int, partition_name: str | None, partition: Partition | None, time: str) -> str | None:
    """Why a GPU job of ``nodes`` x ``gpus_per_node`` on ``partition`` is billed for GPUs it does not use; None if it is not."""
    billing = p.site.billing
    on_gpus = p.node.gpus and (p.node.processes_on or "gpu") == "gpu"
    if billing is None or partition is None or not partition.whole_node or not on_gpus or gpus_per_node >= p.node.gpus:
        return None
    per_node, used = p.node.gpus, nodes * gpus_per_node
    cost = partitions.units(billing.hourly(nodes, used, True), billing)
    held = f"a whole node of {partition_name}" if nodes == 1 else f"{nodes} whole nodes of {partition_name}"
    uses = f"uses {used}" + (f" ({gpus_per_node} per node)" if nodes > 1 else "")
    shapes = [f"ask for {per_node} GPUs per node (--gpus-per-node {per_node})"]
    fewer = -(-used // per_node)
    if fewer < nodes and used % fewer == 0:
        shapes.append(f"put its {used} GPUs on fewer nodes (-N {fewer} --gpus-per-node {used // fewer})")
    by_gpu = [
        f"{name}: {partitions.units(billing.hourly(nodes, used, False), billing)}"
        for name, part in partitions.fitting(p, nodes, time).items()
        if not part.whole_node and billing.hourly(nodes, used, False) is not None
    ]
    if by_gpu:
        shapes.append(f"a partition billed by the GPU ({', '.join(by_gpu)})")
    return f"billed for {nodes * per_node} GPUs ({held}{f': {cost}' if cost else ''}), {uses}: " + ", or ".join(shapes)


def grouped(found: Iterable[tuple[str, str]], shown: int = 3) -> list[str]:
    """One line per distinct warning of (item, warning) pairs, naming its first items and counting the rest."""
    by_text: dict[str, list[str]] = {}
    for item, text in found:
        by_text.setdefault(text, []).append(item)
    return [
        ", ".join(items[:shown]) + (f" (+{len(items) - shown} more)" if len(items) > shown else "") + f": {text}"
        for text, items in by_text.items()
    ]


def warnings(plans: Iterable) -> list[str]:
    """The plans' cost warnings, grouped (:func:`grouped`)."""
    return grouped((plan.item, plan.waste) for plan in plans if plan.waste)
