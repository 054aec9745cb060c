"""Which partition a GPU job goes to, and what the site bills for it there.

A job that names no partition (neither ``run --partition`` nor params'
``orchestrator.partition``) goes, where the profile states how the site bills
(``site.billing``), to the partition that fits its shape and time and bills least for
it: on LUMI a 1-GCD item goes to small-g, billed by the GCD (0.5 GPU-hours an hour),
not to standard-g, which bills the whole node (4). A tie goes to the profile's default
partition. Partitions marked ``automatic: false`` (debug queues with few jobs per user)
are only used when named. Without billing figures the default partition is used, as a
site's own documentation would have it. A named partition is kept, with a note when
another that fits would bill less (``render --check`` shows it).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.config.profile_schema import Billing, Partition, Profile
from orchestrator.slurm import times


@dataclass(frozen=True)
class Choice:
    name: str | None
    billed: str | None  # "0.5 GPU-hours/h": what one hour of the job costs there; None: no billing figure
    note: str | None = None  # a named partition that bills more than needed


def choose(named: str | None, p: Profile, nodes: int, gpus_per_node: int, time: str) -> Choice:
    """The partition of a GPU job of ``nodes`` x ``gpus_per_node`` for ``time`` (see the module)."""
    billing = p.site.billing
    default = p.scheduler.default_partition
    offers = fitting(p, nodes, time)
    priced = {name: cost for name, part in offers.items() if (cost := _hourly(billing, part, nodes, gpus_per_node)) is not None}
    if named is not None:
        mine = p.scheduler.partitions.get(named)
        cost = _hourly(billing, mine, nodes, gpus_per_node) if mine else None
        cheaper = min(priced.items(), key=lambda kv: kv[1], default=None)
        note = None
        if billing and cost is not None and cheaper is not None and cheaper[1] < cost:
            note = (
                f"partition {named} bills {cost:g} {billing.unit} an hour for this job; {cheaper[0]} would bill "
                f"{cheaper[1]:g} (leave the partition unnamed to have it chosen)"
            )
        return Choice(named, units(cost, billing), note)
    if not priced:
        cost = _hourly(billing, p.scheduler.partitions.get(default or ""), nodes, gpus_per_node)
        return Choice(default, units(cost, billing))
    order = [default, *p.scheduler.partitions]  # ties: the default, then the profile's order
    best = min(priced, key=lambda name: (priced[name], order.index(name)))
    return Choice(best, units(priced[best], billing))


def fitting(p: Profile, nodes: int, time: str) -> dict[str, Partition]:
    """The GPU partitions the plan may pick for this shape and time: the profile's node (not
    another node type's, such as LUMI-C's under LUMI-G), enough nodes and time, not kept for CPU work."""
    try:
        wanted = times.seconds(time)
    except ValueError:
        return {}
    kept = {p.scheduler.cpu_partition, p.scheduler.service_partition}
    return {
        name: part
        for name, part in p.scheduler.partitions.items()
        if part.automatic
        and part.cpus_per_node is None
        and name not in kept
        and nodes <= part.max_nodes
        and wanted <= times.seconds(part.time_limit(nodes))
    }


def _hourly(billing: Billing | None, part: Partition | None, nodes: int, gpus_per_node: int) -> float | None:
    if billing is None or part is None:
        return None
    return billing.hourly(nodes, nodes * gpus_per_node, part.whole_node)


def units(cost: float | None, billing: Billing | None) -> str | None:
    return None if cost is None or billing is None else f"{cost:g} {billing.unit}/h"
