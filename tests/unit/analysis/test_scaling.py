"""Scaling arithmetic (orchestrator/analysis/scaling.py) on fixed inputs: speedup and efficiency
against the smallest configuration, a missing run shown as missing, weak or strong scaling."""

from __future__ import annotations

import pytest

from orchestrator.analysis import scaling


def test_speedup_and_efficiency_against_the_smallest_configuration():
    points = [
        scaling.ScalingPoint(1, 100.0),
        scaling.ScalingPoint(2, 190.0),
        scaling.ScalingPoint(4, 360.0),
        scaling.ScalingPoint(8, 640.0),
    ]
    scaled = scaling.scale(points)
    assert [s.speedup for s in scaled] == pytest.approx([1.0, 1.9, 3.6, 6.4])
    assert [s.ideal for s in scaled] == [1.0, 2.0, 4.0, 8.0]
    assert [s.efficiency for s in scaled] == pytest.approx([1.0, 0.95, 0.9, 0.8])


def test_a_missing_smallest_run_moves_the_baseline_and_stays_missing():
    points = [scaling.ScalingPoint(1, None), scaling.ScalingPoint(2, 200.0), scaling.ScalingPoint(8, 560.0)]
    scaled = scaling.scale(points)
    assert scaling.baseline_index(points) == 1
    assert scaled[0] == scaling.Scaled(None, None, None)  # missing, not 0
    assert scaled[1].efficiency == 1.0 and scaled[2].speedup == pytest.approx(2.8) and scaled[2].efficiency == pytest.approx(0.7)
    assert scaling.scale([scaling.ScalingPoint(1, None)]) == [scaling.Scaled(None, None, None)]


@pytest.mark.parametrize(
    ("batches", "mode"),
    [
        ([(16, 16), (16, 32), (16, 64)], "weak"),  # per-device batch fixed, global grows
        ([(64, 64), (32, 64), (16, 64)], "strong"),  # global batch fixed
        ([(16, 16), (32, 64), (16, 64)], "mixed"),
        ([(None, None), (16, 32), (16, 64)], "mixed"),  # a run that does not say
    ],
)
def test_weak_or_strong_scaling_is_read_from_the_batches(batches, mode):
    points = [scaling.ScalingPoint(g, 1.0, b, gb) for g, (b, gb) in zip((1, 2, 4), batches, strict=True)]
    assert scaling.scaling_mode(points) == mode
    assert scaling.scaling_mode(points[:1]) == "single"
