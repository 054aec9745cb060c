"""Profiled real runs of `python -m experiments.lm` (experiments/common/profiling.py; conftest.lm_runs):
one process, twice the batch with a trace, two DDP processes over gloo; and `orchestrator profile-diff`
of two of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import PROFILE_CATEGORIES, invoke
from trained import LM_RUNS_GROUP, PROFILE_WINDOW

# The runs are shared with test_lm_runs.py (conftest.lm_runs).
pytestmark = pytest.mark.xdist_group(LM_RUNS_GROUP)


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["small", "large", "ddp"])
def test_a_profiled_run_writes_its_breakdown_operators_and_metrics(lm_runs, name):
    output = lm_runs[name].ended_well()
    breakdown = _json(output / "profile" / "breakdown.json")
    assert (breakdown["steps"], breakdown["window"], breakdown["device"]) == (3, PROFILE_WINDOW, "cpu")
    assert sorted(breakdown["categories"]) == sorted(PROFILE_CATEGORIES)
    shares = {c: v["share"] for c, v in breakdown["categories"].items()}
    assert sum(shares.values()) == pytest.approx(1.0)
    assert sum(v["ms_per_step"] for v in breakdown["categories"].values()) == pytest.approx(breakdown["step_ms"])
    # On a CPU there is no device activity; the host's operators (and under DDP its collectives) are most of a step.
    assert all(shares[c] == 0 for c in ("kernel", "memcpy", "memset", "runtime"))
    assert shares["cpu_exec"] + shares["communication"] > 0.5 and shares["cpu_exec"] > 0.1
    assert shares["data_loader"] > 0 and shares["other"] > 0
    metrics = _json(output / "metrics.json")
    profile = metrics["profile"]
    assert sorted(profile) == sorted([*(f"{c}_pct" for c in PROFILE_CATEGORIES), "step_ms", "steps"])
    assert profile["step_ms"] == pytest.approx(breakdown["step_ms"]) and profile["cpu_exec_pct"] == pytest.approx(100 * shares["cpu_exec"])
    assert profile["steps"] == 3 and profile["step_ms"] > 0
    operators = _json(output / "profile" / "operators.json")
    assert operators["steps"] == 3 and operators["unit"] == "us per step"
    ops = operators["operators"]
    assert not any(op.startswith("ProfilerStep") for op in ops) and "aten::mm" in ops
    mm = ops["aten::mm"]
    assert mm["calls"] > 0 and mm["host_total_us"] >= mm["host_self_us"] > 0 and mm["device_total_us"] == 0
    # Each rank's Chrome trace only when asked for.
    traces = sorted(p.name for p in (output / "profile").glob("*.pt.trace.json.gz"))
    assert traces == (["rank0.pt.trace.json.gz"] if name == "large" else [])


@pytest.mark.slow
def test_ddp_over_gloo_shows_communication(lm_runs):
    breakdown = _json(lm_runs["ddp"].ended_well() / "profile" / "breakdown.json")
    assert breakdown["world_size"] == 2
    assert breakdown["categories"]["communication"]["share"] > 0
    assert _json(lm_runs["small"].ended_well() / "profile" / "breakdown.json")["categories"]["communication"]["share"] == 0
    ops = _json(lm_runs["ddp"].output / "profile" / "operators.json")["operators"]
    assert ops["c10d::allreduce_"]["calls"] >= 1


@pytest.mark.slow
def test_profile_diff_of_two_real_runs(lm_runs):
    from orchestrator.analysis import opdiff

    runs = {name: lm_runs[name].ended_well() for name in ("small", "large", "ddp")}
    small, large = opdiff.load(runs["small"]), opdiff.load(runs["large"] / "profile" / "operators.json")
    comparison = opdiff.compare(small, large, top=5)
    assert len(comparison.rows) == 5 and comparison.operators >= len(small.operators)
    deltas = [abs(r.delta_host_us) for r in comparison.rows]
    assert deltas == sorted(deltas, reverse=True)
    mm = next(r for r in opdiff.compare(small, large, top=10**6).rows if r.operator == "aten::mm")
    assert mm.baseline_calls == mm.exp_calls  # the same model: the same matrix products per step
    assert mm.delta_host_us == pytest.approx(mm.exp_host_us - mm.baseline_host_us)

    result = invoke("profile-diff", str(runs["small"]), str(runs["large"]), "--top", "3")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("Operator"))
    assert "Baseline Calls" in lines[header] and "Delta Host Duration%" in lines[header]
    assert [line.split()[0] for line in lines[header + 1 :]] == [r.operator.split()[0] for r in comparison.rows[:3]]
    assert "top 3 of" in result.output

    result = invoke("profile-diff", str(runs["small"]), str(runs["ddp"]), "--json", "--top", "4")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["baseline"]["steps"] == data["exp"]["steps"] == 3 and len(data["rows"]) == 4
    comm = opdiff.compare(small, opdiff.load(runs["ddp"]), top=10**6)
    allreduce = next(r for r in comm.rows if r.operator == "c10d::allreduce_")
    assert allreduce.baseline_calls == 0 and allreduce.delta_calls_pct is None  # only DDP reduces gradients
