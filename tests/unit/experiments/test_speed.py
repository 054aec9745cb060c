"""Fast steps on GPUs without losing what runs on CPU: the model compiled in place (the
same checkpoints), the fused optimizer, and the device the orchestrator chose."""

from __future__ import annotations

import json

import pytest
from support import LM_SHORT, isolated, model_weights, require_training, signal_at

TEXT = "".join(f"line {i}: the quick brown fox jumps over the lazy dog {i * 7 % 13}\n" for i in range(400))


@pytest.fixture
def in_process(tmp_path, monkeypatch):
    (tmp_path / "corpus.txt").write_text(TEXT)
    monkeypatch.delenv("ORCH_ACCELERATOR", raising=False)
    yield from isolated(tmp_path, monkeypatch)


def parse(argv, monkeypatch=None, **env):
    from experiments.lm import cli as lm

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return lm.parse_args(lm.build_parser(), ["--output", "out", *argv])


# --- the device: the orchestrator's choice, and GPUs asked for but missing ------------------


def test_the_accelerator_defaults_to_the_orchestrators_choice(in_process, monkeypatch):
    assert parse([]).accelerator == "cpu"  # auto, and torch sees no GPU here
    assert parse([], monkeypatch, ORCH_ACCELERATOR="cpu").accelerator == "cpu"
    assert parse([], monkeypatch, ORCH_ACCELERATOR="cpu").compile_mode is None  # compiling pays off on GPUs only
    assert parse(["--compile", "default"]).compile_mode == "default"


@pytest.mark.parametrize(
    ("argv", "env", "gpus", "fragment"),
    [
        ([], {"ORCH_ACCELERATOR": "tpu"}, 0, "ORCH_ACCELERATOR='tpu' is not a device; valid: cpu, gpu"),
        ([], {"ORCH_ACCELERATOR": "gpu"}, 0, "GPUs asked for (--accelerator gpu or ORCH_ACCELERATOR=gpu), but torch sees none here"),
        (["--accelerator", "gpu"], {}, 0, "run where GPUs are, or pass --accelerator cpu"),
        (["--accelerator", "gpu", "--devices", "2", "--global-batch-size", "8"], {}, 1, "--devices 2 GPUs per node, but torch sees 1 here"),
    ],
)
def test_gpus_asked_for_but_missing_are_one_usage_error(in_process, monkeypatch, capsys, argv, env, gpus, fragment):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    with pytest.raises(SystemExit) as exit:
        parse(argv, monkeypatch, **env)
    assert exit.value.code == 2
    assert fragment in capsys.readouterr().err
    assert not (in_process / "out").exists()


def test_on_gpus_the_model_is_compiled_by_default(in_process, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    args = parse(["--devices", "2", "--global-batch-size", "8"], monkeypatch, ORCH_ACCELERATOR="gpu")
    assert (args.accelerator, args.precision, args.compile_mode) == ("gpu", "bf16-mixed", "default")
    assert parse(["--compile", "off"]).compile_mode is None
    assert parse(["--compile", "max-autotune"]).compile_mode == "max-autotune"


# --- the optimizer ---------------------------------------------------------------------------


def test_adamw_is_fused_where_the_device_has_the_kernel():
    require_training()
    import torch

    from experiments.common import speed

    net = torch.nn.Linear(4, 4)
    optimizer = speed.adamw(net.parameters(), lr=1e-3)
    assert optimizer.param_groups[0]["fused"] is True  # torch >= 2.4 has a fused CPU AdamW
    assert speed.optimizer_form(optimizer) == "AdamW fused"
    frozen = torch.nn.Linear(4, 4)
    frozen.bias.requires_grad_(False)
    assert len(speed.adamw(frozen.parameters()).param_groups[0]["params"]) == 1  # only what trains


# --- compiled runs: trained, checkpointed and resumed ----------------------------------------


@pytest.mark.slow
def test_a_compiled_run_resumes_exactly_and_its_checkpoints_load_uncompiled(in_process):
    import torch

    from experiments.lm import cli as lm
    from experiments.lm.module import CausalLM

    argv = [*LM_SHORT, "--data", "corpus.txt", "--max-steps", "6", "--batch-size", "4", "--seed", "3", "--tokenizer", "bytes"]
    compiled = [*argv, "--compile", "default"]
    lm.main([*compiled, "--output", "whole"])
    metrics = json.loads((in_process / "whole/metrics.json").read_text())
    assert (metrics["compile"], metrics["optimizer"], metrics["device"], metrics["accelerator"]) == ("default", "AdamW fused", "cpu", "cpu")
    assert metrics["timed_steps"] == 5  # the first step, where it compiled, is not timed

    # Interrupted at step 2 and resumed, compiled: the same weights as the whole run, bit for bit.
    with pytest.raises(SystemExit) as exit:
        lm.main([*compiled, "--output", "cut"], callbacks=[signal_at(2)])
    assert exit.value.code == 75
    requeue = torch.load(in_process / "cut/model/requeue.ckpt", map_location="cpu", weights_only=False)
    eager_keys = set(CausalLM("tiny", 256, 32, 1e-3).state_dict())
    assert set(requeue["state_dict"]) == eager_keys  # no `_orig_mod.` from the compiled module
    lm.main([*compiled, "--output", "cut"])
    whole, resumed = model_weights(in_process / "whole"), model_weights(in_process / "cut")
    assert set(whole) == eager_keys and all(torch.equal(whole[k], resumed[k]) for k in whole)

    # The compiled run's checkpoint resumed with compile off: it continues from step 2 with
    # the same data order. Inductor fuses and reorders float arithmetic, so eager and
    # compiled steps agree to rounding, not bit for bit: compared with an eager whole run.
    with pytest.raises(SystemExit):
        lm.main([*compiled, "--output", "switch"], callbacks=[signal_at(2)])
    lm.main([*argv, "--compile", "off", "--output", "switch"])
    lm.main([*argv, "--compile", "off", "--output", "eager"])
    switched, eager = model_weights(in_process / "switch"), model_weights(in_process / "eager")
    assert json.loads((in_process / "switch/metrics.json").read_text())["compile"] == "off"
    curve = (in_process / "switch/dvclive/plots/metrics/train/loss.tsv").read_text().splitlines()
    assert [line.split("\t")[0] for line in curve[1:]] == [str(s) for s in range(1, 7)]  # each step once
    # Adam divides by sqrt(v): rounding in a tiny gradient becomes an update-sized step, so the
    # bound is absolute, 1e-4 (a wrong resume, e.g. lost moments or a restarted order, moves
    # weights by the learning rate, 1e-3, per step).
    for name in eager:
        torch.testing.assert_close(switched[name], eager[name], rtol=0, atol=1e-4)
    # ...and the uncompiled model loads the compiled run's final weights as they are.
    CausalLM.load_from_checkpoint(in_process / "whole/model/model.ckpt", map_location="cpu", weights_only=False)
