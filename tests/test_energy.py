"""Energy per job from each source (accounting, sampled, estimate), emissions, the power
callback with fake sensors, the profiles' site figures; and the accounting path on the testbed."""

from __future__ import annotations

import subprocess
import time
from types import SimpleNamespace

import pytest
from fakes import FakeRunner, ok

from orchestrator.analysis import energy
from orchestrator.config import profile
from orchestrator.errors import ProfileError
from orchestrator.slurm import config as slurm_config

# `sacct -X -D -n -P --format=JobIDRaw,State,ElapsedRaw,ConsumedEnergyRaw` on the testbed
# (AcctGatherEnergyType=acct_gather_energy/none): 0 or nothing, never a measurement.
TESTBED_SACCT = "244|COMPLETED|3|0\n245|COMPLETED|2|0\n246|REQUEUED|31|\n246|COMPLETED|12|\n"
# The same query where a plugin gathers energy (values as pm_counters gives them, in J).
METERED_SACCT = "900|REQUEUED|1800|1250000\n900|COMPLETED|600|410000\n901|COMPLETED|60|0\n"
CONFIG = "ClusterName             = {cluster}\nAcctGatherEnergyType    = {plugin}\nAcctGatherNodeFreq      = 0 sec\n"


def accounting(text: str, plugin: str, cluster: str = "lumi") -> energy.Accounting:
    return energy.Accounting(plugin, cluster, energy.parse_sacct_energy(text))


# --- accounting ----------------------------------------------------------------------


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
    runner = FakeRunner({"scontrol": ok(CONFIG.format(cluster="lumi", plugin="acct_gather_energy/pm_counters")), "sacct": ok(METERED_SACCT)})
    acct = energy.query_accounting(runner, ["900", "901"])
    assert runner.calls == [
        ["scontrol", "show", "config"],
        ["sacct", "-X", "-D", "-n", "-P", "-j", "900,901", "--format=JobIDRaw,State,ElapsedRaw,ConsumedEnergyRaw"],
    ]
    assert acct.problem is None and acct.cluster_name == "lumi" and acct.records_energy and set(acct.jobs) == {"900", "901"}


def test_query_without_slurm_or_with_sacct_failing_says_why():
    none_here = energy.query_accounting(FakeRunner(installed=set()), ["1"])
    assert none_here.problem and "not found" in none_here.problem
    assert energy.from_accounting(none_here, "1") == (None, none_here.problem)
    failing = FakeRunner({"scontrol": ok(CONFIG.format(cluster="x", plugin="acct_gather_energy/none")), "sacct": ok("", "sacct: error: slurmdbd down", rc=1)})
    acct = energy.query_accounting(failing, ["1"])
    assert "slurmdbd down" in acct.problem


# --- sampled, estimate, choice, emissions --------------------------------------------------


def test_sampled_energy_from_the_run_metrics():
    assert energy.from_samples({"gpu_energy_j": 7.2e6, "power_source": "nvml-energy"}) == (7.2e6, "GPU energy sampled during the run (nvml-energy)")
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


# --- the profiles' device power and site figures ---------------------------------------------


@pytest.mark.parametrize("name", ["lumi", "frontier", "juwels-booster", "generic-nvidia"])
def test_gpu_profiles_carry_power_and_site_with_sources(name):
    p = profile.load(name).profile
    assert p.node.gpu.power_w and p.node.gpu.peak_tflops_bf16
    assert p.site.pue >= 1 and p.site.carbon_intensity_g_per_kwh >= 0 and p.site.source


def test_lumi_site_is_hydro_with_a_low_pue():
    site = profile.load("lumi").profile.site
    assert 1.0 <= site.pue <= 1.05 and site.carbon_intensity_g_per_kwh <= 30


def test_bad_site_values_are_reported(tmp_path):
    text = profile.load("testbed").text + "site: {pue: 0.9, carbon_intensity_g_per_kwh: -1}\n"
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError) as err:
        profile.load(str(path))
    assert "site.pue 0.9" in err.value.render() and "carbon_intensity_g_per_kwh -1" in err.value.render()


# --- the power callback (experiments/common/power.py) with fake sensors -----------------------------


power = pytest.importorskip("experiments.common.power", reason="experiments/common/power.py needs torch and pytorch_lightning")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_trapezoid_integration():
    assert power.integrate([(0, 100), (1, 100), (3, 200)]) == 100 + 300
    assert power.integrate([(5, 100)]) == 0


def test_sampler_integrates_power_from_its_thread():
    clock = Clock()
    watts = iter([100.0, 100.0, 300.0, 300.0, 300.0, 300.0] + [300.0] * 1000)

    def read():
        clock.now += 1.0  # each reading one second after the last
        return next(watts)

    sampler = power.Sampler(power.Sensor("fake", "power", read, interval_s=0.001), clock)
    sampler.start()
    time.sleep(0.05)
    joules, seconds = sampler.stop()
    n = len(sampler.samples)
    assert n > 3 and seconds == pytest.approx(n - 1)  # samples at 1..n: the span they cover
    assert joules == pytest.approx(power.integrate(sampler.samples))


def test_energy_counter_needs_two_reads_and_survives_a_failing_read():
    readings = iter([1000.0, RuntimeError("driver hiccup"), 1600.0])

    def read():
        value = next(readings)
        if isinstance(value, Exception):
            raise value
        return value

    sampler = power.Sampler(power.Sensor("nvml-energy", "energy", read, interval_s=3600), Clock())
    sampler.start()
    sampler._take()  # the failing one: lost, not fatal
    assert sampler.stop()[0] == 600.0


class FakeStrategy:
    def __init__(self, ranks: int = 1) -> None:
        self.ranks = ranks

    def reduce(self, tensor, reduce_op):
        assert reduce_op == "sum"
        return tensor * self.ranks  # every rank measured the same


def fit(monitor, device="cpu", ranks=1, seconds=0.05):
    import torch

    trainer = SimpleNamespace(strategy=FakeStrategy(ranks))
    module = SimpleNamespace(device=torch.device(device))
    monitor.on_fit_start(trainer, module)
    time.sleep(seconds)
    monitor.on_fit_end(trainer, module)
    return monitor.metrics()


def test_power_monitor_sums_ranks_and_reports_its_source():
    metrics = fit(power.PowerMonitor(sensor=power.Sensor("fake", "power", lambda: 250.0, interval_s=0.005)), ranks=4)
    assert metrics["power_source"] == "fake" and metrics["power_devices"] == 4
    assert metrics["gpu_power_mean_w"] == pytest.approx(250.0, rel=1e-6)
    assert metrics["gpu_energy_j"] == pytest.approx(4 * 250.0 * 0.05, rel=0.5)  # 4 ranks x 250 W x ~0.05 s


def test_on_cpu_nothing_is_sampled_and_the_source_is_none():
    monitor = power.PowerMonitor()
    assert fit(monitor, seconds=0) == {"gpu_energy_j": None, "gpu_power_mean_w": None, "power_source": "none", "power_devices": 0}
    assert monitor._sampler is None  # no thread was started


def test_a_resumed_run_adds_the_checkpointed_energy():
    monitor = power.PowerMonitor(sensor=power.Sensor("fake", "power", lambda: 100.0, interval_s=0.005))
    monitor.load_state_dict({"energy_j": 5000.0})
    metrics = fit(monitor, ranks=2)
    assert metrics["gpu_energy_j"] == pytest.approx(2 * 5000 + 2 * 100 * 0.05, rel=0.05)
    assert "earlier runs" in metrics["power_note"] and monitor.state_dict()["energy_j"] > 5000


ROCM_SMI_JSON = '{"card0": {"Average Graphics Package Power (W)": "237.0"}, "card1": {"Average Graphics Package Power (W)": "N/A (Secondary die)"}}'


def test_rocm_smi_json_and_device_mapping():
    assert power.rocm_smi_watts(ROCM_SMI_JSON, 0) == 237.0
    assert power.rocm_smi_watts(ROCM_SMI_JSON, 1) is None  # MI250X's secondary die
    assert power.rocm_smi_watts("not json", 0) is None
    assert power.physical_index(0, {"ROCR_VISIBLE_DEVICES": "5"}) == 5  # LUMI: one GCD per task
    assert power.physical_index(1, {"ROCR_VISIBLE_DEVICES": "4,6", "HIP_VISIBLE_DEVICES": "1,0"}) == 4
    assert power.physical_index(0, {"ROCR_VISIBLE_DEVICES": "GPU-abc"}) is None
    assert power.physical_index(3, {}) == 3


def test_torch_power_draw_units():
    assert power.torch_watts(250_000, hip=False) == 250.0  # NVML: mW
    assert power.torch_watts(237, hip=True) == 237.0  # ROCm torch <= 2.13: W
    assert power.torch_watts(237_000, hip=True) == 237.0  # ROCm once pytorch#197553 lands: mW
    assert power.torch_watts(0, hip=True) is None


def test_no_sensor_on_cpu():
    import torch

    assert power.find_sensor(torch.device("cpu")) is None


# --- the accounting path on the real testbed ---------------------------------------------


@pytest.mark.slurm
def test_accounting_path_on_the_testbed(slurm_testbed, tmp_path):
    from orchestrator.util.runner import SubprocessRunner

    argv = ["sbatch", "--parsable", "-A", "project_465000858", "-p", "debug", "-N", "1", "-n", "1", "-t", "1", f"--chdir={tmp_path}", "--output=/dev/null", "--wrap", "sleep 1"]
    job = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    runner = SubprocessRunner()
    deadline = time.monotonic() + 120
    while True:
        acct = energy.query_accounting(runner, [job])
        runs = acct.jobs.get(job, ())
        if runs and runs[-1].state == "COMPLETED":
            break
        assert time.monotonic() < deadline, f"job {job} did not complete: {runs}"
        time.sleep(1)
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True).stdout
    assert acct.problem is None and acct.cluster_name == "testbed"
    assert acct.plugin == slurm_config.parse_config_value(config, "AcctGatherEnergyType")
    joules, note = energy.from_accounting(acct, job)
    chosen = energy.choose((joules, note), (None, "no samples"), (None, "no power_w"), acct.plugin)
    if acct.records_energy and all((r.energy_j or 0) > 0 for r in runs):
        assert joules == sum(r.energy_j for r in runs) and chosen.source == "accounting"
    else:
        # The testbed has no energy plugin: sacct prints 0 or nothing, which must not pass for a measurement.
        assert joules is None and chosen.source != "accounting" and chosen.kwh is None
        assert "no energy" in note
