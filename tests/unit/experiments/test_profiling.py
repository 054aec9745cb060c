"""The profiler window of the experiments (experiments/common/profiling.py): the breakdown on
made-up events, event categories, bad windows and options. Profiled real runs:
tests/integration/local/test_profiling_runs.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import PROFILE_CATEGORIES, require_training
from trained import IN_PROCESS_GROUP

pytestmark = pytest.mark.xdist_group(IN_PROCESS_GROUP)


@pytest.fixture
def profiling():
    require_training()  # the module is a Lightning callback; its pure helpers need no torch to run
    from experiments.common import profiling

    return profiling


def _ev(profiling, name, kind, start, end):
    return profiling.Event(name, kind, float(start), float(end))


# --- the breakdown, on made-up events ----------------------------------------------------------


def test_each_instant_goes_to_the_highest_priority_category(profiling):
    def e(*a):
        return _ev(profiling, *a)

    events = [
        e("ProfilerStep#3", "user_annotation", 0, 1000),
        e("ProfilerStep#4", "user_annotation", 1000, 2000),
        e("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation", 0, 200),
        e("aten::linear", "cpu_op", 100, 600),  # 100-200 under the loader (higher priority), 200-600 its own
        e("cudaLaunchKernel", "cuda_runtime", 500, 550),  # runtime beats host ops
        e("ampere_sgemm", "kernel", 540, 800),  # kernel beats everything: 540-800
        e("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 790, 850),  # 800-850 left for it
        e("Memset (Device)", "gpu_memset", 1100, 1110),
        e("c10d::allreduce_", "cpu_op", 1200, 1300),
        e("gloo:all_reduce", "user_annotation", 1250, 1500),  # communication: 1200-1500
        e("aten::add_", "cpu_op", 1400, 1600),  # 1500-1600 cpu_exec
        e("[memory]", "cpu_instant_event", 0, 2000),  # no category
        e("aten::mm", "cpu_op", -500, 50),  # before the window: only 50 us inside (under the loader anyway)
    ]
    result = profiling.breakdown(events)
    assert result.steps == 2
    expected_us = {
        "kernel": 260,
        "memcpy": 50,
        "memset": 10,
        "communication": 300,
        "runtime": 40,  # 500-540
        "data_loader": 200,
        "cpu_exec": 300 + 100,  # 200-500, 1500-1600
    }
    expected_us["other"] = 2000 - sum(expected_us.values())
    assert result.ms_per_step == pytest.approx({k: v / 2 / 1000 for k, v in expected_us.items()})
    assert list(result.ms_per_step) == PROFILE_CATEGORIES
    assert result.step_ms == pytest.approx(1.0)
    assert sum(result.share(c) for c in PROFILE_CATEGORIES) == pytest.approx(1.0)
    layout = result.to_json()
    assert layout["steps"] == 2 and list(layout["categories"]) == PROFILE_CATEGORIES
    assert layout["categories"]["kernel"] == {"ms_per_step": pytest.approx(0.13), "share": pytest.approx(0.13)}
    summary = result.metrics()
    assert summary["step_ms"] == pytest.approx(1.0) and summary["kernel_pct"] == pytest.approx(13.0)
    assert sum(summary[f"{c}_pct"] for c in PROFILE_CATEGORIES) == pytest.approx(100.0)


def test_device_work_after_the_last_host_step_still_counts(profiling):
    def e(*a):
        return _ev(profiling, *a)

    events = [e("ProfilerStep#1", "user_annotation", 0, 100), e("sgemm", "kernel", 80, 300), e("sgemm", "kernel", 400, 500)]
    result = profiling.breakdown(events)  # the window runs to 300: the kernel started inside the step; the later one did not
    assert result.step_ms == pytest.approx(0.3)
    assert result.ms_per_step["kernel"] == pytest.approx(0.22) and result.ms_per_step["other"] == pytest.approx(0.08)


def test_an_empty_window_is_all_other_and_no_steps_is_an_error(profiling):
    result = profiling.breakdown([_ev(profiling, "ProfilerStep#0", "user_annotation", 10, 30)])
    assert result.ms_per_step["other"] == pytest.approx(0.02) and result.share("other") == 1.0
    assert all(result.ms_per_step[c] == 0 for c in PROFILE_CATEGORIES[:-1])
    with pytest.raises(ValueError, match="no ProfilerStep# events"):
        profiling.breakdown([_ev(profiling, "aten::mm", "cpu_op", 0, 10)])
    with pytest.raises(ValueError):
        profiling.breakdown([])


@pytest.mark.parametrize(
    ("name", "kind", "expected"),
    [
        ("aten::broadcast_tensors", "cpu_op", "cpu_exec"),  # "broadcast", but compute
        ("c10d::broadcast_", "cpu_op", "communication"),
        ("nccl:all_reduce", "user_annotation", "communication"),
        ("record_param_comms", "cpu_op", "cpu_exec"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "kernel", "communication"),
        ("void at::native::vectorized_elementwise_kernel<4>", "kernel", "kernel"),
        ("hipLaunchKernel", "cuda_runtime", "runtime"),
        ("cuLaunchKernel", "cuda_driver", "runtime"),
        ("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "user_annotation", "data_loader"),
        ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__init__", "user_annotation", "cpu_exec"),
        ("ProfilerStep#7", "user_annotation", None),
        ("[memory]", "cpu_instant_event", None),
    ],
)
def test_categories_of_events(profiling, name, kind, expected):
    assert profiling.category(_ev(profiling, name, kind, 0, 1)) == expected


class _OldKinetoEvent:
    """A profiler event as PyTorch 2.11 gives it (the GPU images' torch): no ``activity_type()``."""

    def __init__(self, name: str, on_device: bool = False, annotation: bool = False):
        import torch

        self._name, self._annotation = name, annotation
        self._device = torch.autograd.DeviceType.CUDA if on_device else torch.autograd.DeviceType.CPU

    def name(self) -> str:
        return self._name

    def device_type(self):
        return self._device

    def is_user_annotation(self) -> bool:
        return self._annotation


@pytest.mark.parametrize(
    ("event", "kind"),
    [
        (dict(name="void at::native::vectorized_elementwise_kernel<4>", on_device=True), "kernel"),
        (dict(name="Memcpy HtoD (Pageable -> Device)", on_device=True), "gpu_memcpy"),
        (dict(name="Memset (Device)", on_device=True), "gpu_memset"),
        (dict(name="cudaLaunchKernel"), "cuda_runtime"),
        (dict(name="cuLaunchKernelEx"), "cuda_runtime"),
        (dict(name="hipMemcpyAsync"), "cuda_runtime"),
        (dict(name="aten::mm"), "cpu_op"),
        (dict(name="cutlass_heuristics"), "cpu_op"),
        (dict(name="ProfilerStep#7", annotation=True), "user_annotation"),
    ],
)
def test_events_without_their_kind_are_told_by_device_and_name(profiling, event, kind):
    # Issue 37's first H100 lease: every profiled run failed on torch 2.11 ('_KinetoEvent' has no 'activity_type').
    assert profiling.activity_kind(_OldKinetoEvent(**event)) == kind


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("5", "is not START:COUNT"),
        ("a:2", "is not START:COUNT"),
        ("0:3", "at least 1"),
        ("2:0", "at least 1"),
        ("2:3:4", "is not START:COUNT"),
    ],
)
def test_bad_windows_are_argparse_errors(profiling, text, message):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match=message):
        profiling.parse_window(text)
    assert profiling.parse_window("4:2") == profiling.Window(4, 2) and profiling.Window(4, 2).end == 6


@pytest.mark.parametrize(
    ("module", "argv", "fragment"),
    [
        ("lm", ["--profile-steps", "0:2"], "argument --profile-steps: '0:2': START and COUNT must be at least 1"),
        (
            "lm",
            ["--max-steps", "6", "--profile-steps", "4:3"],
            "--profile-steps 4:3 needs steps up to 6, but --max-steps 6 runs steps 0 to 5",
        ),
        ("lm", ["--profile-trace"], "--profile-trace needs --profile-steps START:COUNT"),
        ("classify", ["--max-steps", "3", "--profile-steps", "x"], "argument --profile-steps: 'x' is not START:COUNT"),
        ("classify", ["--max-steps", "3", "--profile-steps", "2:2"], "--profile-steps 2:2 needs steps up to 3"),
    ],
)
def test_bad_profile_options_stop_before_anything_starts(module, argv, fragment, capsys):
    require_training()
    import importlib

    import torch

    experiment = importlib.import_module(f"experiments.{module}.cli")
    with pytest.raises(SystemExit) as exit:
        experiment.main(["--output", "never-made", "--accelerator", "cpu", *argv])
    assert exit.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"python -m experiments.{module}: error: ") and fragment in last, last
    assert not Path("never-made").exists() and not torch.distributed.is_initialized()
