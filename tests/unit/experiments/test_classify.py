"""The classification experiment (experiments/classify/): its registries, its data, and the requeue
signal in this process. Real runs of `python -m experiments.classify`: tests/integration/local/test_classify_runs.py."""

from __future__ import annotations

import json

import pytest
from support import isolated, require_training, signal_at
from trained import IN_PROCESS_GROUP

pytestmark = pytest.mark.xdist_group(IN_PROCESS_GROUP)

# --- registries --------------------------------------------------------------------------------


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


# --- the requeue signal, in this process -------------------------------------------------------


@pytest.fixture
def in_process(tmp_path, monkeypatch):
    yield from isolated(tmp_path, monkeypatch)


@pytest.mark.slow
def test_a_signal_in_the_last_step_finishes_the_run(in_process, monkeypatch):
    """As for the LM (tests/unit/experiments/test_lm.py): nothing is left to resume, so the run ends normally, writes its results
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


@pytest.mark.parametrize("command", ["experiments.classify", "experiments.lm"])
def test_a_usage_error_answers_before_lightning_is_imported(command, tmp_path):
    """Lightning costs ~6 s of CPU to import: a mistyped option must not wait for it (nor a job spend it)."""
    import subprocess
    import sys

    from support import ROOT

    code = f"import runpy, sys\ntry:\n    runpy.run_module({command!r}, run_name='__main__')\nexcept SystemExit as e:\n"
    code += "    print(e.code, 'pytorch_lightning' in sys.modules)"
    argv = [sys.executable, "-c", code, "--model", "huge", "--output", str(tmp_path / "out")]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["2", "False"], done.stdout + done.stderr
    assert "invalid choice: 'huge'" in done.stderr and not (tmp_path / "out").exists()
