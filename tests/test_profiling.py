"""The profiler window of the experiments (experiments/common/profiling.py) and the two-run operator comparison
(orchestrator/analysis/opdiff.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_experiments import require_training
from test_lm import SHORT, _environment

from orchestrator.cli import main as cli_main

CATEGORIES = ["kernel", "memcpy", "memset", "communication", "runtime", "data_loader", "cpu_exec", "other"]


@pytest.fixture
def profiling():
    require_training()  # the module is a Lightning callback; its pure helpers need no torch to run
    from experiments.common import profiling

    return profiling


def _ev(profiling, name, kind, start, end):
    return profiling.Event(name, kind, float(start), float(end))


# --- the breakdown, on made-up events ----------------------------------------------


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
    assert list(result.ms_per_step) == CATEGORIES
    assert result.step_ms == pytest.approx(1.0)
    assert sum(result.share(c) for c in CATEGORIES) == pytest.approx(1.0)
    layout = result.to_json()
    assert layout["steps"] == 2 and list(layout["categories"]) == CATEGORIES
    assert layout["categories"]["kernel"] == {"ms_per_step": pytest.approx(0.13), "share": pytest.approx(0.13)}
    summary = result.metrics()
    assert summary["step_ms"] == pytest.approx(1.0) and summary["kernel_pct"] == pytest.approx(13.0)
    assert sum(summary[f"{c}_pct"] for c in CATEGORIES) == pytest.approx(100.0)


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
    assert all(result.ms_per_step[c] == 0 for c in CATEGORIES[:-1])
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


# --- real runs ---------------------------------------------------------------------

MAX_STEPS = 6
WINDOW = "2:3"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Three profiled runs at once: one process, the same with twice the batch and a trace, and two DDP processes over gloo."""
    require_training()
    base = tmp_path_factory.mktemp("profiling")
    plans = {
        "small": ["--batch-size", "4"],
        "large": ["--batch-size", "8", "--profile-trace"],
        "ddp": ["--devices", "2", "--global-batch-size", "8"],
    }
    started = {}
    for name, extra in plans.items():
        cwd = base / name
        cwd.mkdir()
        argv = [sys.executable, "-m", "experiments.lm", *SHORT, "--max-steps", str(MAX_STEPS), "--seed", "5", "--tokenizer", "bytes"]
        argv += ["--profile-steps", WINDOW, "--output", str(cwd / "out"), *extra]
        started[name] = subprocess.Popen(argv, cwd=cwd, env=_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done = {}
    for name, process in started.items():
        _, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, f"{name}: {stderr[-4000:]}"
        assert "terminate called" not in stderr, f"{name}: {stderr[-4000:]}"
        done[name] = base / name / "out"
    return done


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["small", "large", "ddp"])
def test_a_profiled_run_writes_its_breakdown_operators_and_metrics(runs, name):
    output = runs[name]
    breakdown = _json(output / "profile" / "breakdown.json")
    assert (breakdown["steps"], breakdown["window"], breakdown["device"]) == (3, WINDOW, "cpu")
    assert sorted(breakdown["categories"]) == sorted(CATEGORIES)
    shares = {c: v["share"] for c, v in breakdown["categories"].items()}
    assert sum(shares.values()) == pytest.approx(1.0)
    assert sum(v["ms_per_step"] for v in breakdown["categories"].values()) == pytest.approx(breakdown["step_ms"])
    # On a CPU there is no device activity; the host's operators (and under DDP its collectives) are most of a step.
    assert all(shares[c] == 0 for c in ("kernel", "memcpy", "memset", "runtime"))
    assert shares["cpu_exec"] + shares["communication"] > 0.5 and shares["cpu_exec"] > 0.1
    assert shares["data_loader"] > 0 and shares["other"] > 0
    metrics = _json(output / "metrics.json")
    profile = metrics["profile"]
    assert sorted(profile) == sorted([*(f"{c}_pct" for c in CATEGORIES), "step_ms", "steps"])
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
def test_ddp_over_gloo_shows_communication(runs):
    breakdown = _json(runs["ddp"] / "profile" / "breakdown.json")
    assert breakdown["world_size"] == 2
    assert breakdown["categories"]["communication"]["share"] > 0
    assert _json(runs["small"] / "profile" / "breakdown.json")["categories"]["communication"]["share"] == 0
    ops = _json(runs["ddp"] / "profile" / "operators.json")["operators"]
    assert ops["c10d::allreduce_"]["calls"] >= 1


# --- the comparison ----------------------------------------------------------------


def _cli(*args: str):
    return CliRunner().invoke(cli_main, ["profile-diff", *args])


@pytest.mark.slow
def test_profile_diff_of_two_real_runs(runs):
    from orchestrator.analysis import opdiff

    small, large = opdiff.load(runs["small"]), opdiff.load(runs["large"] / "profile" / "operators.json")
    comparison = opdiff.compare(small, large, top=5)
    assert len(comparison.rows) == 5 and comparison.operators >= len(small.operators)
    deltas = [abs(r.delta_host_us) for r in comparison.rows]
    assert deltas == sorted(deltas, reverse=True)
    mm = next(r for r in opdiff.compare(small, large, top=10**6).rows if r.operator == "aten::mm")
    assert mm.baseline_calls == mm.exp_calls  # the same model: the same matrix products per step
    assert mm.delta_host_us == pytest.approx(mm.exp_host_us - mm.baseline_host_us)

    result = _cli(str(runs["small"]), str(runs["large"]), "--top", "3")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("Operator"))
    assert "Baseline Calls" in lines[header] and "Delta Host Duration%" in lines[header]
    assert [line.split()[0] for line in lines[header + 1 :]] == [r.operator.split()[0] for r in comparison.rows[:3]]
    assert "top 3 of" in result.output

    result = _cli(str(runs["small"]), str(runs["ddp"]), "--json", "--top", "4")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["baseline"]["steps"] == data["exp"]["steps"] == 3 and len(data["rows"]) == 4
    comm = opdiff.compare(small, opdiff.load(runs["ddp"]), top=10**6)
    allreduce = next(r for r in comm.rows if r.operator == "c10d::allreduce_")
    assert allreduce.baseline_calls == 0 and allreduce.delta_calls_pct is None  # only DDP reduces gradients


def _operators(path: Path, rows: dict[str, tuple[float, float]], steps: int = 2) -> Path:
    path.write_text(json.dumps({"steps": steps, "operators": {k: {"calls": c, "host_total_us": t} for k, (c, t) in rows.items()}}))
    return path


def test_comparison_rows_percentages_and_text(tmp_path):
    from orchestrator.analysis import opdiff

    base = _operators(tmp_path / "a.json", {"aten::empty": (1293, 50375), "aten::as_strided": (2786, 1901), "aten::old": (1, 10)})
    exp = _operators(tmp_path / "b.json", {"aten::empty": (934, 3124), "aten::as_strided": (3147, 1170), "aten::new": (2, 5.5)})
    comparison = opdiff.compare(opdiff.load(base), opdiff.load(exp), top=10)
    assert [r.operator for r in comparison.rows] == ["aten::empty", "aten::as_strided", "aten::old", "aten::new"]
    empty = comparison.rows[0]
    assert (empty.delta_calls, empty.delta_host_us) == (-359, -47251)
    assert empty.delta_calls_pct == pytest.approx(-27.76, abs=0.01) and empty.delta_host_pct == pytest.approx(-93.80, abs=0.01)
    new = comparison.rows[3]
    assert (new.baseline_calls, new.delta_calls_pct, new.delta_host_pct) == (0, None, None)
    text = opdiff.render_text(comparison)
    rows = {line.split()[0]: line.split() for line in text.splitlines()[4:]}
    assert rows["aten::empty"] == ["aten::empty", "1,293", "934", "-359", "-27.76%", "50,375", "3,124", "-47,251", "-93.80%"]
    assert rows["aten::new"] == ["aten::new", "0", "2", "+2", "-", "0", "5.5", "+5.5", "-"]
    # Aligned: every row as wide as the header, names left, numbers right.
    assert len({len(line) for line in text.splitlines()[4:]}) == 1
    assert opdiff.compare(opdiff.load(base), opdiff.load(exp), top=1).rows == comparison.rows[:1]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: d / "missing", "no such file or folder"),
        (lambda d: d, "no profile/operators.json in"),
        (lambda d: _write(d / "x.json", "{not json"), "not readable JSON"),
        (lambda d: _write(d / "x.json", '{"steps": 2, "operators": {"a": {"calls": 1}}}'), "not an operators.json"),
        (lambda d: _write(d / "x.json", '{"steps": 0, "operators": {}}'), "steps must be a positive integer"),
        (lambda d: _write(d / "x.json", "[1, 2]"), "not an operators.json"),
    ],
)
def test_bad_input_is_one_message_and_exit_2(tmp_path, setup, message):
    good = _operators(tmp_path / "good.json", {"aten::mm": (1, 2)})
    bad = setup(tmp_path)
    for args in ([str(bad), str(good)], [str(good), str(bad), "--json"]):
        result = _cli(*args)
        assert result.exit_code == 2, result.output
        assert message in result.output and "Traceback" not in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_the_comparison_stays_off_torch_and_is_listed():
    code = (
        "import sys, orchestrator.cli, orchestrator.analysis.opdiff, orchestrator.cli.profile_diff; "
        "print(sorted(m for m in ('torch', 'pytorch_lightning', 'lightning', 'numpy', 'rich') if m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"
    result = CliRunner().invoke(cli_main, ["--help"])
    assert "profile-diff" in result.output
