"""Energy per job from each source (accounting, sampled, estimate) and emissions
(orchestrator/analysis/energy.py). The accounting path on the real testbed:
tests/integration/slurm/test_energy_accounting.py."""

from __future__ import annotations

import pytest
from fakes import FakeRunner, ok

from orchestrator.analysis import energy

# `sacct -X -D -n -P --format=JobID,State,ElapsedRaw,ConsumedEnergyRaw` on the testbed (JobID is JobIDRaw for a plain job)
# (AcctGatherEnergyType=acct_gather_energy/none): 0 or nothing, never a measurement.
TESTBED_SACCT = "244|COMPLETED|3|0\n245|COMPLETED|2|0\n246|REQUEUED|31|\n246|COMPLETED|12|\n"
# The same query where a plugin gathers energy (values as pm_counters gives them, in J).
METERED_SACCT = "900|REQUEUED|1800|1250000\n900|COMPLETED|600|410000\n901|COMPLETED|60|0\n"
CONFIG = "ClusterName             = {cluster}\nAcctGatherEnergyType    = {plugin}\nAcctGatherNodeFreq      = 0 sec\n"


def accounting(text: str, plugin: str, cluster: str = "lumi") -> energy.Accounting:
    return energy.Accounting(plugin, cluster, energy.parse_sacct_energy(text))


# --- accounting --------------------------------------------------------------------------------


def test_parse_keeps_every_run_and_empty_as_none():
    jobs = energy.parse_sacct_energy(TESTBED_SACCT + "garbage line\n")
    assert jobs["244"] == (energy.JobRun("COMPLETED", 3, 0),)
    assert [r.energy_j for r in jobs["246"]] == [None, None] and [r.elapsed_s for r in jobs["246"]] == [31, 12]


def test_no_energy_plugin_means_not_recorded_even_though_sacct_says_0():
    acct = accounting(TESTBED_SACCT, "acct_gather_energy/none", "testbed")
    assert not acct.records_energy
    joules, note = energy.from_accounting(acct, "244")
    assert joules is None and "records no energy" in note and "acct_gather_energy/none" in note
    assert not energy.plugin_records("(null)") and not energy.plugin_records(None)


def test_a_plugin_sums_every_run_of_a_requeued_job():
    acct = accounting(METERED_SACCT, "acct_gather_energy/pm_counters")
    joules, note = energy.from_accounting(acct, "900")
    assert joules == 1_660_000 and "over 2 runs" in note and "pm_counters" in note
    assert energy.accounted_elapsed_s(acct, "900") == 2400
    assert energy.plugin_scope(acct.plugin) == "node" and energy.plugin_scope("acct_gather_energy/gpu") == "gpu"


def test_zero_under_a_plugin_is_not_recorded_either():
    acct = accounting(METERED_SACCT, "acct_gather_energy/ipmi")
    joules, note = energy.from_accounting(acct, "901")
    assert joules is None and "recorded no energy for job 901" in note
    assert energy.from_accounting(acct, "999")[0] is None  # a job sacct does not know


def test_query_asks_scontrol_and_sacct_once_each():
    runner = FakeRunner(
        {"scontrol": ok(CONFIG.format(cluster="lumi", plugin="acct_gather_energy/pm_counters")), "sacct": ok(METERED_SACCT)}
    )
    acct = energy.query_accounting(runner, ["900", "901"])
    assert runner.calls == [
        ["scontrol", "show", "config"],
        ["sacct", "-X", "-D", "-n", "-P", "-j", "900,901", "--format=JobID,State,ElapsedRaw,ConsumedEnergyRaw"],
    ]
    assert acct.problem is None and acct.cluster_name == "lumi" and acct.records_energy and set(acct.jobs) == {"900", "901"}


def test_query_without_slurm_or_with_sacct_failing_says_why():
    none_here = energy.query_accounting(FakeRunner(installed=set()), ["1"])
    assert none_here.problem and "not found" in none_here.problem
    assert energy.from_accounting(none_here, "1") == (None, none_here.problem)
    failing = FakeRunner(
        {"scontrol": ok(CONFIG.format(cluster="x", plugin="acct_gather_energy/none")), "sacct": ok("", "sacct: error: slurmdbd down", rc=1)}
    )
    acct = energy.query_accounting(failing, ["1"])
    assert "slurmdbd down" in acct.problem


# --- sampled, estimate, choice, emissions ------------------------------------------------------


def test_sampled_energy_from_the_run_metrics():
    assert energy.from_samples({"gpu_energy_j": 7.2e6, "power_source": "nvml-energy"}) == (
        7.2e6,
        "GPU energy sampled during the run (nvml-energy)",
    )
    assert energy.from_samples({"gpu_energy_j": None, "power_source": "none"})[0] is None  # a CPU run
    assert "did not sample" in energy.from_samples({"samples_per_second": 3.0})[1]  # no power callback
    assert energy.from_samples({"gpu_energy_j": 0.0, "power_source": "torch"})[0] is None


def test_estimate_is_power_times_gpu_seconds():
    assert energy.estimate(400, 8, 3600)[0] == 400 * 8 * 3600
    assert "estimate" in energy.estimate(400, 8, 3600)[1]
    assert energy.estimate(None, 8, 3600)[0] is None and "power_w" in energy.estimate(None, 8, 3600)[1]
    assert energy.estimate(400, 8, None)[0] is None
    assert energy.estimate(400, 0, 10)[0] is None


def test_sources_are_taken_in_order_and_named():
    nothing, acct = (None, "accounting: no plugin"), (3.6e6, "sacct")
    sampled, est = (1.8e6, "sampled"), (9e6, "estimate: ...")
    chosen = energy.choose(acct, sampled, est, "acct_gather_energy/pm_counters")
    assert (chosen.source, chosen.kwh, chosen.scope) == ("accounting", 1.0, "node")
    chosen = energy.choose(nothing, sampled, est, None)
    assert (chosen.source, chosen.kwh, chosen.scope) == ("sampled", 0.5, "gpu") and chosen.notes == ("accounting: no plugin", "sampled")
    chosen = energy.choose(nothing, (None, "no samples"), est, None)
    assert (chosen.source, chosen.kwh) == ("estimate", 2.5)
    none = energy.choose(nothing, (None, "no samples"), (None, "no power_w"), None)
    assert none.source is None and none.kwh is None and none.note == "accounting: no plugin; no samples; no power_w"


def test_emissions_are_energy_times_pue_times_intensity():
    one_kwh = energy.Energy(3.6e6, "accounting", "node", ())
    em = energy.emissions(one_kwh, 1.1, 380, "juwels")
    assert em.kg == pytest.approx(0.418)
    assert energy.emissions(one_kwh, None, 380, "x").kg is None and "PUE" in energy.emissions(one_kwh, None, 380, "x").note
    assert energy.emissions(energy.Energy(None, None, None, ()), 1.1, 380, "x").kg is None
    metrics = energy.as_metrics(one_kwh, em)
    assert metrics["energy_kwh"] == 1.0 and metrics["energy_source"] == "accounting" and metrics["emissions_kg"] == pytest.approx(0.418)
    assert {"pue", "carbon_intensity_g_per_kwh"} <= set(metrics)
