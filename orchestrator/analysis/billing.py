"""A run's cost in the site's billing units (GPU-hours on LUMI, node-hours on Frontier).

The rates come from the profile's ``site.billing`` (:class:`~orchestrator.config.profile_schema.Billing`);
how the partition allocates decides which one applies: a whole-node partition bills
every node the job held, whatever it used of them; a shared one bills the GPUs the
job was given. The value is what the site's accounting should charge for the
allocation, not a measurement: a figure the profile does not state is reported as
missing with the reason, never guessed or filled with 0.

A requeued job is billed for every run; the caller passes their summed elapsed time.
"""

from __future__ import annotations

import math

from orchestrator.config.profile_schema import Billing

SECONDS_PER_HOUR = 3600.0


def cost(
    billing: Billing | None, nodes: int | None, gpus: int | None, elapsed_s: float | None, exclusive: bool
) -> tuple[float | None, str]:
    """The cost of one allocation in ``billing.unit``, and a note saying how it was computed or why it is missing.

    ``nodes`` and ``gpus``: what the job was allocated (all nodes, all GPUs over them);
    ``elapsed_s``: how long it held them; ``exclusive``: whether the partition
    allocates whole nodes (the profile's ``Partition.whole_node``).
    """
    if billing is None:
        return None, "no billing stated in the profile (site.billing)"
    if elapsed_s is None or not math.isfinite(elapsed_s) or elapsed_s < 0:
        return None, "elapsed time unknown"
    hours = elapsed_s / SECONDS_PER_HOUR
    if exclusive:
        if billing.per_node_hour is None:
            return None, f"the profile states no {billing.unit} per node-hour, and this partition bills whole nodes"
        if nodes is None or nodes < 1:
            return None, "node count unknown"
        rate = billing.hourly(nodes, 0, whole_node=True)
        assert rate is not None  # its per-node rate is stated (above)
        return (
            rate * hours,
            f"{nodes} node(s) x {hours:.4g} h x {billing.per_node_hour:g} {billing.unit} per node-hour (whole nodes billed)",
        )
    if billing.per_gpu_hour is None:
        return None, f"the profile states no {billing.unit} per GPU-hour, and this partition bills by the GPU"
    if gpus is None or gpus < 1:
        # A job without GPUs on a shared partition is billed from another budget (CPU core-hours).
        return None, "GPU count unknown" if gpus is None else "no GPUs allocated: not billed in GPU units"
    rate = billing.hourly(0, gpus, whole_node=False)
    assert rate is not None  # its per-GPU rate is stated (above)
    value = rate * hours
    note = f"{gpus} GPU(s) x {hours:.4g} h x {billing.per_gpu_hour:g} {billing.unit} per GPU-hour"
    return value, f"{note} (more if the job held more cores or memory than its GPUs' share, which some sites bill)"
