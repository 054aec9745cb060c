"""Real runs of `python -m experiments.classify` on CPU, in fresh processes: one device, the same
again, a bad model name; and two DDP processes, as the shipped pipeline's 1x2 item started them
(conftest.shipped_pipeline: `dvc repro` -> `orchestrator run` -> the local script, which starts the
command twice, each with its RANK and LOCAL_RANK, so Lightning starts no process itself)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import ROOT, require_training
from trained import SHIPPED_BENCHMARK, SHIPPED_GROUP, SHIPPED_STEPS, shared_cores_environment

# The DDP run is the shipped pipeline's: one worker makes it for both modules.
pytestmark = pytest.mark.xdist_group(SHIPPED_GROUP)
# The pipeline's two-process item, its log (stdout and stderr, as `orchestrator run` keeps it) and its batch.
PIPELINE_DDP = SHIPPED_BENCHMARK[1]  # results/benchmark/pydoc-topics/tiny/1x2
PIPELINE_DDP_LOG = ".orchestrator/logs/benchmark@pydoc-topics-tiny-device_cfg1-local.log"
PIPELINE_BATCH = 16

MAX_STEPS = 12
REQUIRED_METRICS = {
    "train_loss",
    "val_loss",
    "val_accuracy",
    "samples_per_second",
    "samples_per_second_per_device",
    "mean_step_time_s",
    "flops_per_sample",
    "model_tflops_per_device",
    "mfu",
    "mfu_peak_source",
    "peak_memory_bytes",
    "data_wait_share",
    "step_gap_share",
    "world_size",
    "num_nodes",
    "devices",
    "max_steps",
    "cluster_environment",
    "parameters",
}


@dataclass(frozen=True)
class Run:
    output: Path
    returncode: int
    stdout: str
    stderr: str

    def metrics(self) -> dict:
        assert self.returncode == 0, self.stderr[-4000:]
        return json.loads((self.output / "metrics.json").read_text())


def _command(output: Path, devices: int, model: str = "tiny") -> list[str]:
    return [
        sys.executable, "-m", "experiments.classify",
        "--dataset", "pydoc-topics", "--model", model,
        "--num-nodes", "1", "--devices", str(devices),
        "--max-steps", str(MAX_STEPS), "--batch-size", "8", "--seed", "42",
        "--accelerator", "cpu",
        "--output", str(output),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Run]:
    """Every run at once (imports dominate; they overlap), each in its own folder as cwd."""
    require_training()
    base = tmp_path_factory.mktemp("classify")
    plans = {"single": (1, "tiny"), "again": (1, "tiny"), "bad-model": (1, "huge")}
    started = {}
    for name, (devices, model) in plans.items():
        cwd = base / name
        cwd.mkdir()
        # A nested output that does not exist yet; cwd outside any DVC or Git project.
        output = cwd / "results" / "out"
        logs = (cwd / "stdout.log").open("w"), (cwd / "stderr.log").open("w")
        process = subprocess.Popen(
            _command(output, devices, model), cwd=cwd, env=shared_cores_environment(), stdout=logs[0], stderr=logs[1]
        )
        started[name] = (process, output, logs)
    done = {}
    for name, (process, output, logs) in started.items():
        process.wait(timeout=300)
        for log in logs:
            log.close()
        done[name] = Run(output, process.returncode, *(Path(log.name).read_text() for log in logs))
    return done


@pytest.mark.slow
def test_single_device_run(runs):
    run = runs["single"]
    metrics = run.metrics()
    assert REQUIRED_METRICS <= metrics.keys()
    assert (metrics["world_size"], metrics["num_nodes"], metrics["devices"], metrics["max_steps"]) == (1, 1, 1, MAX_STEPS)
    assert metrics["cluster_environment"] == "LightningEnvironment"
    assert all(math.isfinite(metrics[k]) and metrics[k] > 0 for k in ("train_loss", "val_loss", "samples_per_second", "mean_step_time_s"))
    assert 0 <= metrics["val_accuracy"] <= 1
    assert metrics["samples_per_second_per_device"] == metrics["samples_per_second"]
    # MFU on CPU: against the labelled estimate of the CPUs' peak, from the model FLOPs.
    assert metrics["mfu_peak_source"].startswith("estimate: ") and 0 < metrics["mfu"] < 1
    assert metrics["model_tflops_per_device"] == pytest.approx(metrics["samples_per_second"] * metrics["flops_per_sample"] / 1e12)
    assert 0 <= metrics["data_wait_share"] < 0.5 and metrics["peak_memory_bytes"] > 0
    assert metrics["parameters"] > 0
    assert "cluster_environment=LightningEnvironment world_size=1 global_rank=0 " in run.stdout
    assert any(line.startswith("rank 0/1 env=LightningEnvironment node_rank=0 local_rank=0 cpus=") for line in run.stdout.splitlines())


@pytest.mark.slow
def test_ddp_run_on_two_processes(shipped_pipeline):
    metrics = json.loads((shipped_pipeline / PIPELINE_DDP / "metrics.json").read_text())
    assert REQUIRED_METRICS <= metrics.keys()
    assert (metrics["world_size"], metrics["num_nodes"], metrics["devices"], metrics["max_steps"]) == (2, 1, 2, SHIPPED_STEPS)
    assert metrics["cluster_environment"] == "LightningEnvironment"
    assert metrics["global_batch_size"] == 2 * PIPELINE_BATCH
    assert metrics["samples_per_second_per_device"] * 2 == pytest.approx(metrics["samples_per_second"])
    log = (shipped_pipeline / PIPELINE_DDP_LOG).read_text()
    lines = log.splitlines()
    for rank in (0, 1):
        # The whole log in the message: one CI run missed a rank's line and the log was gone.
        expected = f"rank {rank}/2 env=LightningEnvironment node_rank=0 local_rank={rank} cpus="
        assert any(line.startswith(expected) for line in lines), f"no {expected!r} line in {PIPELINE_DDP_LOG}:\n{log}"
    assert sum(line.startswith("cluster_environment=LightningEnvironment world_size=2 global_rank=0 ") for line in lines) == 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["single", "ddp"])
def test_run_leaves_model_and_plots_only_in_its_output(request, name):
    import torch

    if name == "single":  # run by hand: nothing but its outputs, no dvc.yaml from DVCLive, no lightning_logs, no temp files
        run = request.getfixturevalue("runs")["single"]
        run.metrics()
        output, steps, written = run.output, MAX_STEPS, ["dvclive", "metrics.json", "model"]
        assert sorted(p.name for p in output.parent.parent.iterdir()) == ["results", "stderr.log", "stdout.log"]
    else:  # in the pipeline: beside them only the job's record and DVC's .gitignore; the project as shipped, no lightning_logs
        project = request.getfixturevalue("shipped_pipeline")
        output, steps = project / PIPELINE_DDP, SHIPPED_STEPS
        written = [".gitignore", "dvclive", "metrics.json", "model", "provenance.json"]
        assert not (project / "lightning_logs").exists() and not (project / "dvclive").exists()
        assert (project / "dvc.yaml").read_text() == (ROOT / "dvc.yaml").read_text()
    assert sorted(p.name for p in output.iterdir()) == written
    checkpoint = torch.load(output / "model" / "model.ckpt", map_location="cpu", weights_only=True)
    assert checkpoint["global_step"] == steps and checkpoint["state_dict"]
    assert "optimizer_states" not in checkpoint  # the model only: DVC caches it
    curve = (output / "dvclive" / "plots" / "metrics" / "train" / "loss.tsv").read_text().splitlines()
    assert curve[0] == "step\tloss" and [line.split("\t")[0] for line in curve[1:]] == [str(s) for s in range(1, steps + 1)]


@pytest.mark.slow
def test_same_seed_same_result(runs):
    first, second = runs["single"].metrics(), runs["again"].metrics()
    for key in ("train_loss", "val_loss", "val_accuracy", "dataset_fingerprint", "parameters"):
        assert first[key] == second[key], key


@pytest.mark.slow
def test_unknown_model_on_the_command_line(runs):
    run = runs["bad-model"]
    assert run.returncode == 2
    assert "invalid choice: 'huge'" in run.stderr and "'tiny', 'small', 'base'" in run.stderr
    assert not run.output.exists()
