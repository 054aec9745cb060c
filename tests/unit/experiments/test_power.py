"""The power callback (experiments/common/power.py) with fake sensors: integration of power
readings, energy counters, ranks summed, a resumed run, ROCm and NVML units."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from fakes import FakeStrategy, ManualClock
from trained import IN_PROCESS_GROUP

pytestmark = pytest.mark.xdist_group(IN_PROCESS_GROUP)


@pytest.fixture(scope="module")
def power():
    """The module, imported when a test runs, not when pytest collects: Lightning's import (~8 s of
    CPU) in every worker of the suite would otherwise be spent before any test."""
    return pytest.importorskip("experiments.common.power", reason="experiments/common/power.py needs torch and pytorch_lightning")


def test_trapezoid_integration(power):
    assert power.integrate([(0, 100), (1, 100), (3, 200)]) == 100 + 300
    assert power.integrate([(5, 100)]) == 0


def test_sampler_integrates_power_from_its_thread(power):
    clock = ManualClock()
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


def test_energy_counter_needs_two_reads_and_survives_a_failing_read(power):
    readings = iter([1000.0, RuntimeError("driver hiccup"), 1600.0])

    def read():
        value = next(readings)
        if isinstance(value, Exception):
            raise value
        return value

    sampler = power.Sampler(power.Sensor("nvml-energy", "energy", read, interval_s=3600), ManualClock())
    sampler.start()
    sampler._take()  # the failing one: lost, not fatal
    assert sampler.stop()[0] == 600.0


def fit(monitor, device="cpu", ranks=1, seconds=0.05):
    import torch

    trainer = SimpleNamespace(strategy=FakeStrategy(ranks))
    module = SimpleNamespace(device=torch.device(device))
    monitor.on_fit_start(trainer, module)
    time.sleep(seconds)
    monitor.on_fit_end(trainer, module)
    return monitor.metrics()


def test_power_monitor_sums_ranks_and_reports_its_source(power):
    started = time.monotonic()
    metrics = fit(power.PowerMonitor(sensor=power.Sensor("fake", "power", lambda: 250.0, interval_s=0.005)), ranks=4)
    elapsed = time.monotonic() - started  # the 0.05 s sleep, and on a loaded machine some more
    assert metrics["power_source"] == "fake" and metrics["power_devices"] == 4
    assert metrics["gpu_power_mean_w"] == pytest.approx(250.0, rel=1e-6)
    # 4 ranks x 250 W over the time the sampler ran: at least half the sleep, at most the whole fit.
    assert 4 * 250.0 * 0.05 * 0.5 <= metrics["gpu_energy_j"] <= 4 * 250.0 * elapsed


def test_on_cpu_nothing_is_sampled_and_the_source_is_none(power):
    monitor = power.PowerMonitor()
    assert fit(monitor, seconds=0) == {"gpu_energy_j": None, "gpu_power_mean_w": None, "power_source": "none", "power_devices": 0}
    assert monitor._sampler is None  # no thread was started


def test_a_resumed_run_adds_the_checkpointed_energy(power):
    monitor = power.PowerMonitor(sensor=power.Sensor("fake", "power", lambda: 100.0, interval_s=0.005))
    monitor.load_state_dict({"energy_j": 5000.0})
    metrics = fit(monitor, ranks=2)
    assert metrics["gpu_energy_j"] == pytest.approx(2 * 5000 + 2 * 100 * 0.05, rel=0.05)
    assert "earlier runs" in metrics["power_note"] and monitor.state_dict()["energy_j"] > 5000


ROCM_SMI_JSON = (
    '{"card0": {"Average Graphics Package Power (W)": "237.0"}, "card1": {"Average Graphics Package Power (W)": "N/A (Secondary die)"}}'
)


def test_rocm_smi_json_and_device_mapping(power):
    assert power.rocm_smi_watts(ROCM_SMI_JSON, 0) == 237.0
    assert power.rocm_smi_watts(ROCM_SMI_JSON, 1) is None  # MI250X's secondary die
    assert power.rocm_smi_watts("not json", 0) is None
    assert power.physical_index(0, {"ROCR_VISIBLE_DEVICES": "5"}) == 5  # LUMI: one GCD per task
    assert power.physical_index(1, {"ROCR_VISIBLE_DEVICES": "4,6", "HIP_VISIBLE_DEVICES": "1,0"}) == 4
    assert power.physical_index(0, {"ROCR_VISIBLE_DEVICES": "GPU-abc"}) is None
    assert power.physical_index(3, {}) == 3


def test_torch_power_draw_units(power):
    assert power.torch_watts(250_000, hip=False) == 250.0  # NVML: mW
    assert power.torch_watts(237, hip=True) == 237.0  # ROCm torch <= 2.13: W
    assert power.torch_watts(237_000, hip=True) == 237.0  # ROCm once pytorch#197553 lands: mW
    assert power.torch_watts(0, hip=True) is None


def test_no_sensor_on_cpu(power):
    import torch

    assert power.find_sensor(torch.device("cpu")) is None
