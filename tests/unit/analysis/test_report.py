"""The scaling report built from runs (orchestrator/analysis/report.py, report_write.py): a missing
run reported missing, never zero; energy from each source per run, and overrides. The command,
`orchestrator report`: tests/unit/cli/test_report_command.py."""

from __future__ import annotations

import pytest
from support import weak

from orchestrator.analysis import energy, runs
from orchestrator.analysis import report as rp
from orchestrator.config import profile


def run(config: str, metrics: dict | None, item: str | None = None, prov: dict | None = None) -> runs.Run:
    nodes, gpus = (int(x) for x in config.split("x"))
    expected = runs.Expected(item or f"bench@{config}", "bench", f"results/bench/ds/m/{config}", nodes, gpus)
    return runs.Run(expected, metrics, prov, {}, None if metrics is not None else f"no metrics.json at results/bench/ds/m/{config}")


def test_a_run_without_metrics_is_reported_missing_never_zero():
    juwels = profile.load("juwels-booster").profile
    runs = [run("1x1", weak(1, 100.0)), run("1x2", None), run("1x4", weak(4, 360.0))]
    report = rp.build(runs, {r.expected.item: juwels for r in runs}, None, rp.Overrides(), "juwels-booster")
    (series,) = report.series
    assert series.name == "results/bench/ds/m" and series.mode == "weak" and series.baseline == "1x1"
    missing = series.rows[1]
    assert missing.run.missing and missing.throughput is None and missing.scaled.efficiency is None
    assert missing.energy.kwh is None and missing.emissions.kg is None and missing.mfu is None
    assert [r.item for r in report.missing] == ["bench@1x2"]
    assert series.rows[2].scaled.efficiency == pytest.approx(0.9)

    from orchestrator.analysis import report_write

    header, rows = report_write.table(series)
    cells = dict(zip(header, rows[1], strict=True))
    assert cells["config"] == "1x2 (missing)"
    assert all(cells[h] == "—" for h in ("samples/s", "speedup", "efficiency", "energy (kWh)", "CO2e (kg)"))
    assert "missing: 1x2 (bench@1x2): no metrics.json at" in report_write.markdown(report)
    as_json = rp.metrics_of(report)["bench@1x2"]
    assert as_json["missing"] is True and as_json["throughput"] is None and as_json["efficiency"] is None and as_json["energy_kwh"] is None


def test_energy_sources_per_run_and_overrides():
    juwels = profile.load("juwels-booster").profile
    slurm = {"backend": "slurm", "job_id": "900", "elapsed_s": 600, "requeues": 0}
    runs = [
        run("1x1", weak(1, 100.0), prov=slurm),  # accounting has it
        run("1x2", weak(2, 190.0, gpu_energy_j=3.6e6, power_source="nvml-energy"), prov={**slurm, "job_id": "901"}),  # sampled
        run("1x4", weak(4, 360.0), prov={**slurm, "job_id": "902", "requeues": 1}),  # estimated
    ]
    acct = energy.Accounting(
        "acct_gather_energy/ipmi", "juwels", energy.parse_sacct_energy("900|COMPLETED|600|7200000\n901|COMPLETED|600|0\n")
    )
    report = rp.build(runs, {r.expected.item: juwels for r in runs}, acct, rp.Overrides(carbon_intensity_g_per_kwh=0.0), "juwels-booster")
    a, s, e = report.series[0].rows
    assert (a.energy.source, a.energy.kwh, a.energy.scope) == ("accounting", 2.0, "node")
    assert (s.energy.source, s.energy.kwh) == ("sampled", 1.0) and "recorded no energy for job 901" in s.energy.note
    assert e.energy.source == "estimate" and e.energy.kwh == pytest.approx(400 * 4 * 600 / 3.6e6)
    assert "last of 2 runs only" in e.energy.note  # requeued, elapsed known for the last run only
    assert a.emissions.kg == 0.0 and a.emissions.pue == 1.1  # intensity overridden, PUE from the profile
    assert "--carbon-intensity" in a.emissions.note and "PUE from juwels-booster's site" in a.emissions.note
    elsewhere = rp.build(
        runs[:1], {runs[0].expected.item: juwels}, energy.Accounting("acct_gather_energy/ipmi", "lumi", acct.jobs), rp.Overrides(), "x"
    )
    assert elsewhere.series[0].rows[0].energy.source == "estimate"  # another cluster's job ids are not looked up


def test_cost_in_the_sites_billing_units_by_the_partition_the_job_ran_on():
    """LUMI bills standard-g by the whole node (4 GPU-hours a node-hour), small-g by the GCD
    (0.5 a GCD-hour); a profile without billing, or a partition not known, says why."""
    lumi = profile.load("lumi").profile
    hour = {"backend": "slurm", "job_id": "1", "elapsed_s": 3600, "requeues": 0}
    runs = [
        run("2x8", weak(16, 1600.0, max_steps=100), prov={**hour, "partition": "standard-g", "nodes": 2}),
        run("1x2", weak(2, 200.0), item="bench@small", prov={**hour, "partition": "small-g", "nodes": 1, "job_id": "2"}),
        run("1x4", weak(4, 400.0), item="bench@where", prov={**hour, "partition": "nowhere", "job_id": "3"}),
    ]
    report = rp.build(runs, {r.expected.item: lumi for r in runs}, None, rp.Overrides(), "lumi")
    by_item = {r.item: r for r in report.rows}
    whole = by_item["bench@2x8"]
    assert (whole.cost, whole.cost_unit) == (pytest.approx(8.0), "GPU-hours") and "whole nodes billed" in whole.cost_note
    assert "docs.lumi-supercomputer.eu" in whole.cost_note  # the rate's source, beside the figure
    assert by_item["bench@small"].cost == pytest.approx(1.0)  # 2 GCDs x 1 h x 0.5
    assert by_item["bench@where"].cost is None and "partition the job ran on is unknown (nowhere)" in by_item["bench@where"].cost_note
    # Per million samples trained on (steps x global batch): 8 GPU-hours over 100 x 256 samples.
    assert whole.per_million(whole.cost, "samples/s") == pytest.approx(8.0 / (100 * 16 * 16) * 1e6)
    local = profile.load("local").profile
    (plain,) = rp.build([run("1x1", weak(1, 1.0))], {"bench@1x1": local}, None, rp.Overrides(), "local").rows
    assert plain.cost is None and plain.cost_unit is None and plain.cost_note == "no billing stated in the profile (site.billing)"

    from orchestrator.analysis import report_write

    header, rows = report_write.table(report.series[0])
    assert "cost (GPU-hours)" in header and [row[header.index("cost (GPU-hours)")] for row in rows] == ["1", "—", "8"]


def test_two_revisions_side_by_side_say_what_differs_and_what_is_missing():
    """Bad input for a comparison: two models in one series, a cluster whose profile has no peak,
    a run only one revision profiled; each said in the table, nothing compared silently."""
    from orchestrator.analysis import report_write

    def at(source: str, config: str, model: str, **extra) -> runs.Run:
        made = run(config, weak(int(config[0]) * int(config[2]), 100.0, model=model, parameters=10, model_tflops_per_device=50.0, **extra))
        return runs.Run(made.expected, made.metrics, {"profile": source}, {}, None, source)

    profiled = {"profile": {"step_ms": 200.0, "kernel_pct": 90.0, "cpu_exec_pct": 10.0}}
    made = [at("on-lumi", "1x4", "tiny", **profiled), at("on-lumi", "2x4", "tiny"), at("on-local", "1x4", "small")]
    chosen = {r.key: profile.load("lumi" if r.source == "on-lumi" else "local").profile for r in made}
    built = rp.build(made, chosen, None, rp.Overrides(), "on-lumi, on-local")
    group = next(iter(built.compared().values()))
    assert [s.source for s in group] == ["on-lumi", "on-local"]
    assert rp.workload_notes(group) == ["not the same workload: model tiny (on-lumi); small (on-local)"]
    header, rows = report_write.comparison(group, None)
    mfu = {(row[0], row[1]): row[header.index("MFU (own peak)")] for row in rows}
    assert mfu[("1x4", "on-local")] == "— (no peak in the profile)" and mfu[("1x4", "on-lumi")].endswith("%")
    ((config, header, rows),) = report_write.breakdowns(group)  # only on-lumi's 1x4 was profiled
    assert config == "1x4" and header == ["category", "on-lumi time (us)", "on-lumi %"]
    assert rows == [["average step time", "200,000", "100"], ["kernel", "180,000", "90.00"], ["cpu exec", "20,000", "10.00"]]
    summary = report_write.markdown(built)
    assert "- not the same workload: model tiny (on-lumi); small (on-local)" in summary and "Step time breakdown, 1x4" in summary
    one = rp.build([at("on-lumi", "1x4", "tiny"), at("on-lumi", "2x4", "small")], chosen, None, rp.Overrides(), "x")
    assert any("the runs are of different models (small (10 parameters), tiny (10 parameters))" in n for n in one.series[0].notes)


def test_accounting_kept_in_provenance_serves_a_run_from_another_cluster():
    """`orchestrator record` keeps what the job's own cluster's sacct said (every run's time and
    energy) in provenance: compared by revision from elsewhere, the run keeps them."""
    juwels = profile.load("juwels-booster").profile
    there = energy.Accounting(
        "acct_gather_energy/ipmi", "juwels", energy.parse_sacct_energy("900|REQUEUED|500|5400000\n900|COMPLETED|400|1800000\n")
    )
    kept = energy.to_record(there, "900")
    assert kept == {
        "cluster": "juwels",
        "plugin": "acct_gather_energy/ipmi",
        "runs": [
            {"state": "REQUEUED", "elapsed_s": 500, "energy_j": 5400000},
            {"state": "COMPLETED", "elapsed_s": 400, "energy_j": 1800000},
        ],
    }
    prov = {"backend": "slurm", "job_id": "900", "elapsed_s": 400, "requeues": 1, "accounting": kept}
    here = energy.Accounting("acct_gather_energy/none", "lumi", {})  # this machine's accounting: another cluster's
    for live in (here, None):
        (row,) = rp.build([run("1x1", weak(1, 100.0), prov=prov)], {"bench@1x1": juwels}, live, rp.Overrides(), "x").rows
        assert (row.energy.source, row.energy.kwh) == ("accounting", pytest.approx(2.0))  # both runs: 7.2 MJ
        assert "over 2 runs" in row.energy.note
    # Without it, the same run from elsewhere has only its last run's time for an estimate.
    bare = {k: v for k, v in prov.items() if k != "accounting"}
    (row,) = rp.build([run("1x1", weak(1, 100.0), prov=bare)], {"bench@1x1": juwels}, here, rp.Overrides(), "x").rows
    assert row.energy.source == "estimate" and "last of 2 runs only" in row.energy.note


def test_accounting_of_a_job_not_ended_or_unreadable_is_not_kept():
    running = energy.Accounting("acct_gather_energy/ipmi", "juwels", energy.parse_sacct_energy("900|RUNNING|100|0\n"))
    assert energy.to_record(running, "900") is None
    assert energy.to_record(energy.Accounting(None, None, {}, problem="sacct failed"), "900") is None
    assert energy.from_record({"runs": "garbage"}, "900") is None and energy.from_record(None, "900") is None
    assert energy.from_record({"runs": [{"state": "COMPLETED", "elapsed_s": "x"}]}, "900").jobs["900"][0].elapsed_s is None
