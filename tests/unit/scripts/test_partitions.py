"""The partition a GPU job goes to (orchestrator/scripts/partitions.py): where the site bills
least for its shape and time, the one named when named (with a note when it bills more),
the default where the profile states no billing. One case per shipped site profile."""

from __future__ import annotations

import dataclasses

import pytest

from orchestrator.config import profile
from orchestrator.scripts import partitions


@pytest.mark.parametrize(
    ("nodes", "gpus", "expected", "billed"),
    [
        (1, 1, "small-g", "0.5 GPU-hours/h"),  # by the GCD, not the whole node's 4
        (1, 2, "small-g", "1 GPU-hours/h"),
        (1, 4, "small-g", "2 GPU-hours/h"),
        (1, 8, "standard-g", "4 GPU-hours/h"),  # a tie: the default partition
        (2, 8, "standard-g", "8 GPU-hours/h"),
        (8, 8, "standard-g", "32 GPU-hours/h"),  # small-g allows 4 nodes
    ],
)
def test_lumi_items_go_where_they_bill_least(nodes, gpus, expected, billed):
    lumi = profile.load("lumi").profile
    assert partitions.choose(None, lumi, nodes, gpus, "02:00:00") == partitions.Choice(expected, billed)


def test_time_and_debug_queues_limit_the_choice():
    lumi = profile.load("lumi").profile
    # small-g allows 3 days, standard-g 2: a 1x1 item of 2.5 days still fits small-g; dev-g (3 h) is never picked unnamed.
    assert partitions.choose(None, lumi, 1, 1, "2-12:00:00").name == "small-g"
    assert partitions.choose(None, lumi, 1, 1, "00:30:00").name == "small-g"
    assert partitions.choose("dev-g", lumi, 1, 1, "00:30:00") == partitions.Choice("dev-g", "0.5 GPU-hours/h")


def test_a_named_partition_is_kept_with_a_note_when_another_bills_less():
    lumi = profile.load("lumi").profile
    chosen = partitions.choose("standard-g", lumi, 1, 1, "02:00:00")
    assert (chosen.name, chosen.billed) == ("standard-g", "4 GPU-hours/h")
    assert chosen.note == (
        "partition standard-g bills 4 GPU-hours an hour for this job; small-g would bill 0.5 "
        "(leave the partition unnamed to have it chosen)"
    )
    assert partitions.choose("standard-g", lumi, 1, 8, "02:00:00").note is None  # a whole node anyway


@pytest.mark.parametrize(
    ("name", "expected", "billed"),
    [
        ("frontier", "batch", "1 node-hours/h"),
        ("juwels-booster", "booster", "48 core-hours/h"),
        ("generic-nvidia", "gpu", None),
        ("testbed", "debug", None),
    ],
)
def test_other_sites_keep_their_default_partition(name, expected, billed):
    p = profile.load(name).profile
    assert p.scheduler.default_partition == expected
    assert partitions.choose(None, p, 1, 1, "01:00:00") == partitions.Choice(expected, billed)


def test_without_billing_figures_the_default_partition_is_used():
    lumi = profile.load("lumi").profile
    unbilled = dataclasses.replace(lumi, site=dataclasses.replace(lumi.site, billing=None))
    assert partitions.choose(None, unbilled, 1, 1, "02:00:00") == partitions.Choice("standard-g", None)
