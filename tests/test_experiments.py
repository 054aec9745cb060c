"""The training code (experiments/): its registries, and real runs of `python -m experiments.classify` on CPU."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT, skip_or_fail

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
    "world_size",
    "num_nodes",
    "devices",
    "max_steps",
    "cluster_environment",
    "parameters",
}


def require_training() -> None:
    """Skip without the training extras, except under CI, where a skip is a failure."""
    missing = [name for name in ("torch", "pytorch_lightning", "dvclive") if importlib.util.find_spec(name) is None]
    if missing:
        skip_or_fail(f"{', '.join(missing)} not installed (pip install -e '.[train]')")


def isolated(tmp_path: Path, monkeypatch) -> Iterator[Path]:
    """Runs of an experiment's main in this process, in tmp_path, leaving the process as they found it (a fixture's body)."""
    require_training()
    import torch

    monkeypatch.chdir(tmp_path)  # outside any Git or DVC project, for DVCLive
    for name in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(name)
    deterministic = torch.are_deterministic_algorithms_enabled()
    environ = dict(os.environ)
    handler = signal.getsignal(signal.SIGUSR1)
    yield tmp_path
    torch.use_deterministic_algorithms(deterministic)
    os.environ.clear()
    os.environ.update(environ)  # seed_everything leaves PL_GLOBAL_SEED behind
    signal.signal(signal.SIGUSR1, handler)


def signal_at(step: int):
    """A callback that sends this process the requeue signal after ``step`` steps, as Slurm does before the time limit."""
    import pytorch_lightning as pl

    class SignalAt(pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == step:
                os.kill(os.getpid(), signal.SIGUSR1)

    return SignalAt()


# --- registries -------------------------------------------------------------


def test_unknown_dataset_lists_the_valid_ones():
    require_training()
    from experiments.classify import data

    with pytest.raises(ValueError, match=r"unknown dataset 'nope'; valid datasets: .*pydoc-topics"):
        data.load("nope")


def test_unknown_model_lists_the_valid_ones():
    require_training()
    from experiments.classify import models

    with pytest.raises(ValueError, match=r"unknown model 'huge'; valid models: tiny, small, base"):
        models.build("huge", vocab_size=256, seq_len=128, num_classes=8)


def test_flops_per_sample_counts_the_real_networks_matmul_weights():
    """The FLOP count's weights are the real encoder's: q, k, v, output and feed-forward matrices."""
    require_training()
    from experiments.classify import models

    for name in models.names():
        config = models.config(name)
        net = models.build(name, vocab_size=256, seq_len=16, num_classes=5)
        layers = net.encoder.layers
        weights = sum(layer.self_attn.in_proj_weight.numel() + layer.self_attn.out_proj.weight.numel()
                      + layer.linear1.weight.numel() + layer.linear2.weight.numel() for layer in layers)  # fmt: skip
        assert models.matmul_parameters(config) == weights
        d, n, t = config.d_model, config.n_layers, 16
        assert models.flops_per_sample(config, t, 5) == t * (6 * weights + 12 * n * d * t) + 6 * d * 5


def test_a_bad_peak_stops_the_classifier_before_it_starts(monkeypatch, capsys):
    require_training()
    from experiments.classify import cli as classify

    monkeypatch.setenv("ORCH_PEAK_TFLOPS", "fast")
    with pytest.raises(SystemExit) as stop:
        classify.parse_args(["--output", "never"])
    assert stop.value.code == 2
    assert "ORCH_PEAK_TFLOPS='fast': must be a positive number of TFLOP/s per device" in capsys.readouterr().err


def test_pydoc_topics_is_deterministic_balanced_and_split():
    require_training()
    import torch

    from experiments.classify import data

    first, second = data.load("pydoc-topics"), data.load("pydoc-topics")
    assert first.fingerprint == second.fingerprint
    assert first.num_classes == 8 and first.seq_len == data.SEQ_LEN
    train_tokens, train_labels = first.train.tensors
    val_tokens, val_labels = first.val.tensors
    assert train_tokens.shape[1] == val_tokens.shape[1] == data.SEQ_LEN
    assert int(train_tokens.max()) < first.vocab_size
    # Equal chunks per class in both splits: chance accuracy is exactly 1/K.
    assert len(set(torch.bincount(train_labels).tolist())) == 1
    assert len(set(torch.bincount(val_labels).tolist())) == 1
    train_rows = {bytes(row.to(torch.uint8).tolist()) for row in train_tokens}
    assert not any(bytes(row.to(torch.uint8).tolist()) in train_rows for row in val_tokens)


def test_models_build_and_grow_with_their_size():
    require_training()
    import torch

    from experiments.classify import models

    sizes = []
    for name in models.names():
        net = models.build(name, vocab_size=256, seq_len=16, num_classes=5)
        assert net(torch.zeros(2, 16, dtype=torch.int64)).shape == (2, 5)
        sizes.append(sum(p.numel() for p in net.parameters()))
    assert sizes == sorted(sizes) and sizes[-1] > 10_000_000


# --- real runs ----------------------------------------------------------------


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


def _environment() -> dict[str, str]:
    # Local runs even inside a Slurm allocation or a torchrun: no inherited layout.
    leaked = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in leaked}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Run]:
    """Every run at once (imports dominate; they overlap), each in its own folder as cwd."""
    require_training()
    base = tmp_path_factory.mktemp("classify")
    plans = {"single": (1, "tiny"), "again": (1, "tiny"), "ddp": (2, "tiny"), "bad-model": (1, "huge")}
    started = {}
    for name, (devices, model) in plans.items():
        cwd = base / name
        cwd.mkdir()
        # A nested output that does not exist yet; cwd outside any DVC or Git project.
        output = cwd / "results" / "out"
        # Append mode: the DDP ranks share these files, and O_APPEND puts every write at the end.
        # Without it, two ranks' lines written at once can land on the same offset where the
        # kernel does not serialise the shared position (the likely way one CI run lost rank 1's line).
        logs = (cwd / "stdout.log").open("a"), (cwd / "stderr.log").open("a")
        process = subprocess.Popen(_command(output, devices, model), cwd=cwd, env=_environment(), stdout=logs[0], stderr=logs[1])
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
def test_ddp_run_on_two_processes(runs):
    run = runs["ddp"]
    metrics = run.metrics()
    assert REQUIRED_METRICS <= metrics.keys()
    assert (metrics["world_size"], metrics["num_nodes"], metrics["devices"]) == (2, 1, 2)
    assert metrics["global_batch_size"] == 16
    assert metrics["samples_per_second_per_device"] * 2 == pytest.approx(metrics["samples_per_second"])
    lines = run.stdout.splitlines()
    for rank in (0, 1):
        # The whole stdout in the message: one CI run missed a rank's line and the log was gone.
        expected = f"rank {rank}/2 env=LightningEnvironment node_rank=0 local_rank={rank} cpus="
        found = any(line.startswith(expected) for line in lines)
        assert found, f"no {expected!r} line in stdout:\n{run.stdout}\nstderr tail:\n{run.stderr[-3000:]}"
    assert sum(line.startswith("cluster_environment=LightningEnvironment world_size=2 global_rank=0 ") for line in lines) == 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["single", "ddp"])
def test_run_leaves_model_and_plots_only_in_its_output(runs, name):
    import torch

    run = runs[name]
    run.metrics()
    checkpoint = torch.load(run.output / "model" / "model.ckpt", map_location="cpu", weights_only=True)
    assert checkpoint["global_step"] == MAX_STEPS and checkpoint["state_dict"]
    assert "optimizer_states" not in checkpoint  # the model only: DVC caches it
    curve = (run.output / "dvclive" / "plots" / "metrics" / "train" / "loss.tsv").read_text().splitlines()
    assert curve[0] == "step\tloss" and [line.split("\t")[0] for line in curve[1:]] == [str(s) for s in range(1, MAX_STEPS + 1)]
    # Nothing but the run's own outputs and logs: no dvc.yaml from DVCLive, no lightning_logs, no temp files.
    assert sorted(p.name for p in run.output.iterdir()) == ["dvclive", "metrics.json", "model"]
    assert sorted(p.name for p in run.output.parent.parent.iterdir()) == ["results", "stderr.log", "stdout.log"]


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


# --- the requeue signal, in this process ---------------------------------------


@pytest.fixture
def in_process(tmp_path, monkeypatch):
    yield from isolated(tmp_path, monkeypatch)


@pytest.mark.slow
def test_a_signal_in_the_last_step_finishes_the_run(in_process, monkeypatch):
    """As for the LM (tests/test_lm.py): nothing is left to resume, so the run ends normally, writes its results
    and tells the job script not to requeue, instead of exiting 75 to be run again for nothing."""
    import pytorch_lightning as pl
    import torch

    from experiments.classify import cli as classify

    marker = in_process / "requeue-marker"
    monkeypatch.setenv("ORCH_REQUEUE_MARKER", str(marker))
    checkpointed = []

    class Spy(pl.Callback):
        def on_train_end(self, trainer, pl_module):
            checkpointed.append(marker.exists())  # the signal was acted on

    argv = ["--model", "tiny", "--accelerator", "cpu", "--max-steps", "3", "--batch-size", "8", "--output", "out"]
    classify.main(argv, callbacks=[signal_at(3), Spy()])
    assert checkpointed == [True]
    assert json.loads((in_process / "out" / "metrics.json").read_text())["val_loss"] > 0
    assert not (in_process / "out" / "model" / "requeue.ckpt").exists() and not marker.exists()
    assert torch.load(in_process / "out" / "model" / "model.ckpt", map_location="cpu", weights_only=True)["global_step"] == 3
