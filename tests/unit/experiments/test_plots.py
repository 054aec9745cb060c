"""The per-step curves' logger (experiments/common/plots.py): buffered writes in DVCLive's format, and curves kept across a resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import RecordingLogger
from support import require_training
from trained import IN_PROCESS_GROUP

pytestmark = pytest.mark.xdist_group(IN_PROCESS_GROUP)


@pytest.fixture
def plots(tmp_path, monkeypatch):
    require_training()
    monkeypatch.chdir(tmp_path)  # DVCLive outside any Git or DVC project
    from experiments.common import plots

    return plots


def curve(directory: Path, name: str) -> list[str]:
    return (directory / "plots" / "metrics" / f"{name}.tsv").read_text().splitlines()


def log_steps(logger, steps, loss=lambda s: 1.0 / (s + 1)) -> None:
    for step in steps:  # as Lightning calls it: a 0-based step, numbers already
        logger.log_metrics({"train_loss": loss(step), "epoch": 0}, step=step)
        logger.save()


def test_points_wait_for_the_interval_then_land_in_dvclives_own_format(plots, tmp_path):
    from dvclive import Live

    buffered = plots.PlotsLogger(tmp_path / "ours", flush_every_s=3600)
    log_steps(buffered, range(5))
    assert not (tmp_path / "ours" / "plots").exists()  # nothing written inside the steps
    buffered.finalize("success")

    # The same points through DVCLive itself: byte for byte the same curves and summary.
    live = Live(str(tmp_path / "theirs"), dvcyaml=False, save_dvc_exp=False)
    for step in range(5):
        live.step = step + 1
        live.log_metric("train/loss", 1.0 / (step + 1))
        live.log_metric("epoch", 0)
    live.make_summary()
    for name in ("train/loss", "epoch"):
        assert curve(tmp_path / "ours", name) == curve(tmp_path / "theirs", name)
    assert curve(tmp_path / "ours", "train/loss")[:2] == ["step\tloss", "1\t1.0"]
    ours, theirs = (json.loads((tmp_path / side / "metrics.json").read_text()) for side in ("ours", "theirs"))
    assert ours == theirs == {"train": {"loss": 0.2}, "epoch": 0, "step": 5}


def test_a_flush_every_interval_appends_each_curve(plots, tmp_path):
    logger = plots.PlotsLogger(tmp_path / "d", flush_every_s=0)  # every call is past the interval
    log_steps(logger, range(3))
    assert curve(tmp_path / "d", "train/loss") == ["step\tloss", "1\t1.0", "2\t0.5", "3\t0.3333333333333333"]
    log_steps(logger, range(3, 4))
    logger.finalize("success")
    assert curve(tmp_path / "d", "train/loss")[-1] == "4\t0.25"
    assert len(curve(tmp_path / "d", "epoch")) == 5


def test_a_resumed_run_keeps_the_points_before_its_first_step_and_replaces_the_rest(plots, tmp_path):
    first = plots.PlotsLogger(tmp_path / "d", flush_every_s=0)
    log_steps(first, range(6), loss=lambda s: 100.0 + s)  # flushed up to step 6, then killed: checkpoint at step 4
    log_steps(first, range(6, 8), loss=lambda s: 100.0 + s)
    first._pending.clear()  # a kill loses what was not flushed
    resumed = plots.PlotsLogger(tmp_path / "d", resume=True, flush_every_s=3600)
    log_steps(resumed, range(4, 8), loss=lambda s: 200.0 + s)  # resumes from the checkpoint at step 4
    resumed.finalize("success")
    steps = [line.split("\t") for line in curve(tmp_path / "d", "train/loss")[1:]]
    assert steps == [[str(s), str(100.0 + s - 1)] for s in range(1, 5)] + [[str(s), str(200.0 + s - 1)] for s in range(5, 9)]
    assert [line.split("\t")[0] for line in curve(tmp_path / "d", "epoch")[1:]] == [str(s) for s in range(1, 9)]
    assert not list((tmp_path / "d").rglob("*.partial"))


def test_a_fresh_run_starts_new_curves(plots, tmp_path):
    log_steps(old := plots.PlotsLogger(tmp_path / "d", flush_every_s=0), range(3))
    old.finalize("success")
    new = plots.PlotsLogger(tmp_path / "d")
    log_steps(new, range(1))
    new.finalize("success")
    assert curve(tmp_path / "d", "train/loss") == ["step\tloss", "1\t1.0"]


def test_non_finite_values_are_written_as_dvclive_writes_them(plots, tmp_path):
    logger = plots.PlotsLogger(tmp_path / "d")
    logger.log_metrics({"train_loss": float("nan")}, step=0)
    logger.log_metrics({"train_loss": float("inf")}, step=1)
    logger.finalize("success")
    assert curve(tmp_path / "d", "train/loss")[1:] == ["1\tnan", "2\tinf"]


def test_tensors_are_read_when_written(plots, tmp_path):
    import torch

    logger = plots.PlotsLogger(tmp_path / "d")
    logger.log_metrics({"train_loss": torch.tensor(0.5)}, step=0)
    logger.finalize("success")
    assert curve(tmp_path / "d", "train/loss")[1:] == ["1\t0.5"]
    assert json.loads((tmp_path / "d" / "metrics.json").read_text())["train"] == {"loss": 0.5}


@pytest.mark.parametrize(("every", "max_steps", "logged"), [(1, 4, [0, 1, 2, 3]), (2, 7, [1, 3, 5, 6]), (5, 5, [4])])
def test_log_step_logs_on_lightnings_cadence_and_the_last_step(plots, every, max_steps, logged):
    """experiments.common.callbacks.log_step: the steps Lightning would log (every n-th, counted from 1) and always the last."""
    from types import SimpleNamespace

    import torch

    from experiments.common.callbacks import log_step

    recorder = RecordingLogger()
    trainer = SimpleNamespace(global_step=0, log_every_n_steps=every, max_steps=max_steps)
    module = SimpleNamespace(trainer=trainer, logger=recorder)
    loss = torch.tensor(2.0, requires_grad=True) * 1.5
    for step in range(max_steps):
        trainer.global_step = step
        log_step(module, train_loss=loss)
    assert [step for step, _ in recorder.calls] == logged
    assert recorder.calls[0][1] == {"train_loss": 3.0}
    log_step(SimpleNamespace(trainer=trainer, logger=None), train_loss=loss)  # no logger: nothing to do
