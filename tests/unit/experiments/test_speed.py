"""Fast steps on GPUs without losing what runs on CPU: the model compiled in place (the
same checkpoints) and its compiling steps untimed, the fused optimizer, FP8 and activation
checkpointing, and the device the orchestrator chose."""

from __future__ import annotations

import json

import pytest
from support import LM_SHORT, isolated, model_weights, require_training, signal_at, skip_or_fail
from trained import IN_PROCESS_GROUP

pytestmark = pytest.mark.xdist_group(IN_PROCESS_GROUP)

# Documents separated by blank lines (a .txt's documents): about 10% of them go to validation.
TEXT = "\n\n".join(f"line {i}: the quick brown fox jumps over the lazy dog {i * 7 % 13}" for i in range(400)) + "\n"


@pytest.fixture
def in_process(tmp_path, monkeypatch):
    (tmp_path / "corpus.txt").write_text(TEXT)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))  # where the raw source is prepared
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


def test_the_classifier_takes_the_same_device_choice(in_process, monkeypatch, capsys):
    import torch

    from experiments.classify import cli as classify

    monkeypatch.setenv("ORCH_ACCELERATOR", "cpu")
    assert classify.parse_args(["--output", "out"]).accelerator == "cpu"
    monkeypatch.setenv("ORCH_ACCELERATOR", "gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit:
        classify.parse_args(["--output", "out"])
    assert exit.value.code == 2
    assert "GPUs asked for (--accelerator gpu or ORCH_ACCELERATOR=gpu), but torch sees none here" in capsys.readouterr().err
    monkeypatch.setenv("ORCH_ACCELERATOR", "cpu")
    with pytest.raises(SystemExit):
        classify.parse_args(["--output", "out", "--precision", "fp8"])  # not silently bf16-mixed (its trainer's precision for fp8)
    assert "--precision fp8 is the language model's" in capsys.readouterr().err


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


# --- what is timed ---------------------------------------------------------------------------


def test_each_process_leaves_its_compiling_steps_untimed():
    require_training()
    from types import SimpleNamespace

    import torch

    from experiments.common import speed
    from experiments.common.callbacks import StepTimer, WarmUp

    def measured(warmup: WarmUp, start: int, max_steps: int) -> list[int]:
        trainer = SimpleNamespace(global_step=0, max_steps=max_steps)
        steps = []
        for trainer.global_step in range(start, max_steps):
            if warmup.over(trainer):
                steps.append(trainer.global_step)
        return steps

    compiling = speed.untimed_steps("default")
    assert (compiling, speed.untimed_steps(None), speed.untimed_steps("reduce-overhead")) == (1, 0, 2)
    assert measured(WarmUp(3), 0, 8) == [3, 4, 5, 6, 7]  # the run's warm-up
    assert measured(WarmUp(3, compiling), 0, 8) == [3, 4, 5, 6, 7]  # compiled within it
    assert measured(WarmUp(0, compiling), 5, 8) == [6, 7]  # resumed at step 5: it compiles again there
    assert measured(WarmUp(0, 2), 6, 8) == [7]  # the last step is timed, so a short run has a figure

    timer = StepTimer(0, compiling)
    trainer, module = SimpleNamespace(global_step=0, max_steps=6), SimpleNamespace(device=torch.device("cpu"))
    for step in range(2, 6):  # a run resumed at step 2
        trainer.global_step = step
        timer.on_train_batch_start(trainer, module, None, step)
        trainer.global_step = step + 1
        timer.on_train_batch_end(trainer, module, None, None, step)
    assert timer.timed_steps == 3 and timer.elapsed_s > 0


def test_one_process_checks_the_requeue_signal_without_a_collective(in_process):
    """A collective's .item() at every step would make the host wait for the GPU each time."""
    from types import SimpleNamespace

    import torch

    from experiments.common.requeue import CheckpointOnSignal

    class Strategy:
        reduced = 0

        def reduce(self, flag, reduce_op):
            self.reduced += 1
            return flag

    callback = CheckpointOnSignal(in_process / "requeue.ckpt")
    module = SimpleNamespace(device=torch.device("cpu"))
    for world_size, collectives in ((1, 0), (2, 1)):
        trainer = SimpleNamespace(world_size=world_size, strategy=Strategy())
        callback.on_train_batch_end(trainer, module, None, None, 0)
        assert trainer.strategy.reduced == collectives
    assert not callback.checkpointed


# --- FP8 and activation checkpointing ---------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "fragment"),
    [
        (None, "--precision fp8 needs a GPU with FP8 matmuls: NVIDIA compute capability 8.9 or newer"),
        (("NVIDIA A100-SXM4-80GB", (8, 0)), "NVIDIA A100-SXM4-80GB has none, use bf16-mixed"),
    ],
)
def test_fp8_without_fp8_matmuls_is_a_usage_error(in_process, monkeypatch, capsys, device, fragment):
    import torch

    if device:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: device[0])
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: device[1])
    with pytest.raises(SystemExit) as exit:
        parse(["--precision", "fp8"])
    assert exit.value.code == 2
    assert fragment in capsys.readouterr().err


def test_fp8_runs_bf16_mixed_with_float8_linears_and_keeps_the_checkpoint_keys(in_process, monkeypatch):
    import importlib.util

    import torch

    from experiments.common import speed
    from experiments.lm import gpt

    with monkeypatch.context() as gpu:  # an H100, as torch would see it
        gpu.setattr(torch.version, "hip", None)
        gpu.setattr(torch.cuda, "is_available", lambda: True)
        gpu.setattr(torch.cuda, "device_count", lambda: 1)
        gpu.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA H100 80GB HBM3")
        gpu.setattr(torch.cuda, "get_device_capability", lambda index=None: (9, 0))
        args = parse(["--precision", "fp8"], gpu, ORCH_ACCELERATOR="gpu")
        assert (args.precision, speed.trainer_precision(args.precision)) == ("fp8", "bf16-mixed")
        find_spec = importlib.util.find_spec
        gpu.setattr(importlib.util, "find_spec", lambda name, *rest: None if name == "torchao" else find_spec(name, *rest))
        assert speed.fp8_problems("gpu") == ["--precision fp8 needs torchao (pip install 'orchestrator[fp8]', i.e. torchao==0.18.0)"]

    if importlib.util.find_spec("torchao") is None:
        skip_or_fail("torchao is not installed (the test extra has it)")
    torch.manual_seed(0)
    plain = gpt.build("tiny", 64, 16)
    net = gpt.build("tiny", 64, 16)
    assert speed.float8_in_place(net) == 4 * 4  # qkv, out and the MLP's two, in each of the 4 blocks
    assert type(net.blocks[0].mlp[0]).__name__ == "Float8Linear"
    net.load_state_dict(plain.state_dict())  # strict: the same keys and shapes both ways
    assert set(net.state_dict()) == set(plain.state_dict())
    assert speed.float8_in_place(torch.nn.Sequential(torch.nn.Linear(16, 8))) == 0  # 8 outputs: too narrow for FP8 matmuls


def test_activation_checkpointing_recomputes_each_block_with_the_same_gradients():
    require_training()
    import torch

    from experiments.lm import gpt

    def gradients(checkpointing: bool) -> tuple[dict, int]:
        torch.manual_seed(0)
        net = gpt.build("tiny", 64, 16)
        net.activation_checkpointing = checkpointing
        calls = []
        # On a part of the block: the recomputation stops once it has what the backward needs, before the block's own hooks.
        net.blocks[0].attn.register_forward_hook(lambda *_: calls.append(1))
        net(torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))).pow(2).mean().backward()
        return {name: p.grad for name, p in net.named_parameters()}, len(calls)

    (plain, once), (checkpointed, twice) = gradients(False), gradients(True)
    assert (once, twice) == (1, 2)  # the block ran again in the backward pass
    assert all(torch.equal(plain[name], checkpointed[name]) for name in plain)


def test_a_bf16_residual_stream_keeps_float32_weights_and_the_same_loss_is_the_autocast_default_and_needs_autocast(in_process, capsys):
    require_training()
    import torch

    from experiments.lm import gpt

    def step(residual_dtype):
        torch.manual_seed(0)
        net = gpt.build("tiny", 64, 16)
        net.residual_dtype = residual_dtype
        seen = []
        net.blocks[1].register_forward_pre_hook(lambda module, inputs: seen.append(inputs[0].dtype))
        tokens = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(1))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = net(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, 64), tokens[:, 1:].reshape(-1))
        loss.backward()
        grads = {name: p.grad for name, p in net.named_parameters()}
        return seen, loss.item(), grads, {p.dtype for p in net.parameters()}

    (fp32_seen, fp32_loss, fp32_grads, _), (bf16_seen, bf16_loss, bf16_grads, dtypes) = step(None), step(torch.bfloat16)
    assert (fp32_seen, bf16_seen, dtypes) == ([torch.float32], [torch.bfloat16], {torch.float32})
    # One bf16 rounding of the sum per block: the same loss to bf16's precision, and gradients close to it.
    assert bf16_loss == pytest.approx(fp32_loss, rel=1e-2)
    for name, grad in fp32_grads.items():
        assert torch.isfinite(bf16_grads[name]).all()
        assert torch.nn.functional.cosine_similarity(grad.flatten(), bf16_grads[name].flatten(), dim=0) > 0.99, name

    with pytest.raises(SystemExit) as exit:
        parse(["--residual", "bf16"])  # CPU: 32-true, no autocast
    assert exit.value.code == 2
    assert "--residual bf16 needs --precision bf16-mixed or fp8 (autocast to bf16); this run's is 32-true" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit:
        parse(["--precision", "bf16-mixed", "--residual", "fp16"])
    assert exit.value.code == 2
    assert "argument --residual: invalid choice: 'fp16' (choose from 'auto', 'bf16', 'fp32')" in capsys.readouterr().err
    # auto: bf16 wherever the run autocasts to bf16 (measured on an H100: docs/development/benchmarks.md), else float32.
    assert parse([]).residual == "fp32"
    assert parse(["--precision", "bf16-mixed"]).residual == "bf16"
    assert parse(["--precision", "bf16-mixed", "--residual", "fp32"]).residual == "fp32"
    # The option's first spelling still works, and says the new one.
    capsys.readouterr()
    assert parse(["--bf16-residual", "--precision", "bf16-mixed"]).residual == "bf16"
    assert "--bf16-residual is now --residual bf16" in capsys.readouterr().err


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
    assert json.loads((in_process / "cut/metrics.json").read_text())["timed_steps"] == 3  # it compiled again at step 2
    whole, resumed = model_weights(in_process / "whole"), model_weights(in_process / "cut")
    assert set(whole) == eager_keys and all(torch.equal(whole[k], resumed[k]) for k in whole)

    # The compiled run's checkpoint resumed with compile off: it continues from step 2 with
    # the same data order. Inductor fuses and reorders float arithmetic, so eager and
    # compiled steps agree to rounding, not bit for bit: compared with an eager whole run.
    with pytest.raises(SystemExit):
        lm.main([*compiled, "--output", "switch"], callbacks=[signal_at(2)])
    lm.main([*argv, "--compile", "off", "--output", "switch"])
    # The eager run recomputes its activations (the results are the same; see above).
    lm.main([*argv, "--compile", "off", "--activation-checkpointing", "--output", "eager"])
    eager_metrics = json.loads((in_process / "eager/metrics.json").read_text())
    assert (eager_metrics["activation_checkpointing"], eager_metrics["residual"]) == (True, "fp32")
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


# --- the attention kernel ---------------------------------------------------------------------


def test_attention_auto_keeps_pytorchs_order_on_cpu_and_named_kernels_need_a_gpu(in_process, capsys):
    from experiments.common import speed

    args = parse([])
    assert args.attention == "auto"
    assert speed.attention_form("auto", "cpu") == "default"
    with speed.attention_kernels("auto", "cpu"):  # nothing changed: the CPU run's kernels are PyTorch's own
        pass
    with pytest.raises(SystemExit) as exit:
        parse(["--attention", "cudnn"])
    assert exit.value.code == 2
    assert "--attention cudnn needs a GPU; valid on CPU: auto, math" in capsys.readouterr().err
    assert parse(["--attention", "math"]).attention == "math"


def test_attention_auto_puts_cudnn_first_on_hopper(monkeypatch):
    require_training()
    import torch
    from torch.nn.attention import SDPBackend

    from experiments.common import speed

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    assert speed.attention_form("auto", "gpu") == "cudnn"
    before = torch._C._get_sdp_priority_order()
    with speed.attention_kernels("auto", "gpu"):
        assert torch._C._get_sdp_priority_order()[0] == int(SDPBackend.CUDNN_ATTENTION)
    assert torch._C._get_sdp_priority_order() == before  # restored after the fit
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))  # an A100: PyTorch's order
    assert speed.attention_form("auto", "gpu") == "default"
