"""billing.cost: the arithmetic of whole-node and per-GPU billing, and every missing case with its reason."""

import pytest

from orchestrator.analysis.billing import cost
from orchestrator.config.profile_schema import Billing

LUMI = Billing(unit="GPU-hours", per_node_hour=4, per_gpu_hour=0.5, source="LUMI billing policy")
NODES_ONLY = Billing(unit="node-hours", per_node_hour=1, source="OLCF")
GPUS_ONLY = Billing(unit="GPU-hours", per_gpu_hour=1, source="a site billing by the GPU")


def test_whole_nodes_are_billed_per_node_hour():
    # LUMI's own example: 4 standard-g nodes for 24 hours = 384 GPU-hours.
    value, note = cost(LUMI, nodes=4, gpus=32, elapsed_s=24 * 3600, exclusive=True)
    assert value == pytest.approx(384)
    assert note == "4 node(s) x 24 h x 4 GPU-hours per node-hour (whole nodes billed)"


def test_whole_nodes_cost_the_same_however_few_gpus_the_job_used():
    assert cost(LUMI, nodes=2, gpus=1, elapsed_s=1800, exclusive=True)[0] == pytest.approx(4.0)
    assert cost(LUMI, nodes=2, gpus=None, elapsed_s=1800, exclusive=True)[0] == pytest.approx(4.0)


def test_shared_partitions_are_billed_per_gpu_hour():
    # LUMI's own example: 2 GCDs on small-g for 24 hours = 24 GPU-hours.
    value, note = cost(LUMI, nodes=1, gpus=2, elapsed_s=86400, exclusive=False)
    assert value == pytest.approx(24)
    assert note.startswith("2 GPU(s) x 24 h x 0.5 GPU-hours per GPU-hour")
    assert "cores or memory" in note  # the part of the rule not modelled is said


def test_frontier_node_hours_count_only_the_time_run():
    # OLCF's example: 6 nodes for 1 hour are 6 node-hours; a job that exits after half its request pays half.
    assert cost(NODES_ONLY, nodes=6, gpus=48, elapsed_s=3600, exclusive=True)[0] == pytest.approx(6)
    assert cost(NODES_ONLY, nodes=6, gpus=48, elapsed_s=1800, exclusive=True)[0] == pytest.approx(3)


def test_a_job_that_ran_no_time_costs_nothing():
    assert cost(LUMI, nodes=1, gpus=8, elapsed_s=0, exclusive=True)[0] == 0


def test_no_billing_in_the_profile():
    assert cost(None, nodes=1, gpus=8, elapsed_s=3600, exclusive=True) == (None, "no billing stated in the profile (site.billing)")


@pytest.mark.parametrize("elapsed", [None, -1.0, float("nan"), float("inf")])
def test_elapsed_time_unknown(elapsed):
    assert cost(LUMI, nodes=1, gpus=8, elapsed_s=elapsed, exclusive=True) == (None, "elapsed time unknown")


@pytest.mark.parametrize("nodes", [None, 0])
def test_whole_node_billing_needs_the_node_count(nodes):
    assert cost(LUMI, nodes=nodes, gpus=8, elapsed_s=3600, exclusive=True) == (None, "node count unknown")


def test_per_gpu_billing_needs_the_gpu_count():
    assert cost(LUMI, nodes=1, gpus=None, elapsed_s=3600, exclusive=False) == (None, "GPU count unknown")


def test_a_job_without_gpus_on_a_shared_partition_is_not_billed_in_gpu_units():
    value, note = cost(LUMI, nodes=1, gpus=0, elapsed_s=3600, exclusive=False)
    assert value is None and "no GPUs allocated" in note


def test_a_rate_the_profile_does_not_state_is_missing_not_guessed():
    value, note = cost(GPUS_ONLY, nodes=2, gpus=8, elapsed_s=3600, exclusive=True)
    assert value is None and "no GPU-hours per node-hour" in note and "whole nodes" in note
    value, note = cost(NODES_ONLY, nodes=1, gpus=2, elapsed_s=3600, exclusive=False)
    assert value is None and "no node-hours per GPU-hour" in note and "by the GPU" in note
