"""The report names the device that produced each run's figures."""

from orchestrator.analysis.report import _device
from orchestrator.config import profile


def test_the_device_a_run_names_wins_over_the_profiles_and_cpu_runs_say_cpu():
    lumi_gpu = profile.load("lumi").profile.node.gpu
    assert _device({"accelerator": "gpu", "device": "NVIDIA H100 80GB HBM3"}, None) == "NVIDIA H100 80GB HBM3"  # local, on its GPU
    assert _device({"accelerator": "gpu"}, lumi_gpu) == lumi_gpu.model
    assert _device({"accelerator": "cpu", "device": "cpu"}, lumi_gpu) == "CPU"
    assert _device({"accelerator": "gpu", "device": ["odd"]}, None) == "GPU"  # no name to show, but not a CPU run
    assert _device(None, None) == "CPU"
