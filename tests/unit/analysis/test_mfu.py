"""Model FLOPs utilisation (orchestrator/analysis/mfu.py): against the profile's peak, else the run's own."""

from __future__ import annotations

import pytest

from orchestrator.analysis import mfu


def test_mfu_uses_the_profiles_peak_else_the_runs_own():
    lm = {"tokens_per_second": 8000.0, "flops_per_token": 6 * 125e6, "world_size": 4, "mfu": 0.9, "mfu_peak_source": "ORCH_PEAK_TFLOPS"}
    value, note = mfu.mfu(lm, 312.0, "juwels-booster")
    assert value == pytest.approx(8000 * 6 * 125e6 / 4 / 312e12) and "juwels-booster's peak 312" in note
    assert mfu.mfu({"model_tflops_per_device": 95.75}, 191.5, "lumi")[0] == pytest.approx(0.5)
    assert mfu.mfu({"model_flops_per_second": 2 * 156e12, "world_size": 2}, 312.0, "x")[0] == pytest.approx(0.5)
    assert mfu.mfu(lm, None, "local") == (0.9, "the run's own (ORCH_PEAK_TFLOPS); local gives no peak")
    assert mfu.mfu({"samples_per_second": 10.0}, 312.0, "x") == (None, "the metrics carry no model FLOPs")
