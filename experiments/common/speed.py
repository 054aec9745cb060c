"""What makes a step fast on a GPU: the model compiled, the fused optimizer, and FP8 matmuls where the device has them.

``torch.compile`` turns the model's many small kernels (LayerNorm, GELU, residual adds,
the attention reshapes) into a few fused ones; measured on one H100 with the LM's
`large` model it took MFU from 0.36-0.39 to 0.44-0.47. It is applied with
``nn.Module.compile()``, in place, so the module keeps its own state-dict keys:
checkpoints of compiled and uncompiled runs are the same and load into each other
(``torch.compile(module)`` would wrap it and prefix every key with ``_orig_mod.``).
Compiling happens at the first step of every process (a resumed run compiles again),
which the step timer leaves out (:func:`untimed_steps`). Validation calls the model's
``forward``, eagerly: once per run, in eval mode and with a last partial batch, it would
compile twice more for a few batches.

On CPU it is off by default: the shipped pipeline's few steps on two cores would spend
longer compiling than training. The same defaults hold on ROCm: nothing here is
NVIDIA-only (Inductor emits Triton for both).

``--precision fp8`` (the LM): torchao's float8 training, its linears' matmuls in FP8
with dynamic per-tensor scales, the rest in bf16-mixed; on GPUs with FP8 matmuls only.

``--attention`` (the LM): which fused attention kernel ``scaled_dot_product_attention``
runs. PyTorch tries FlashAttention-2 first everywhere; on Hopper and newer NVIDIA GPUs
``auto`` puts cuDNN's kernels first, which use the chip's own matrix instructions (wgmma,
TMA) that FlashAttention-2 does not (docs/development/benchmarks.md's GPU table says what that gains).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
from collections.abc import Iterable, Sequence

import torch

MODES = ("auto", "off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--compile",
        choices=MODES,
        default="auto",
        help="torch.compile mode for the model; auto: default on GPU, off on CPU",
    )


def compile_mode(args: argparse.Namespace) -> str | None:
    """The mode to compile with (``args.accelerator`` resolved), or None for eager."""
    if args.compile == "auto":
        return "default" if args.accelerator == "gpu" else None
    return None if args.compile == "off" else args.compile


def compile_in_place(net: torch.nn.Module, mode: str | None) -> None:
    # dynamic=False: every step has the same shapes; guessing dynamic ones after a first
    # recompile would trade speed for nothing.
    if mode:
        net.compile(mode=mode, dynamic=False)


# Steps at the start of each process that compiling takes: tracing and code generation at
# the first; with CUDA graphs (reduce-overhead, max-autotune) the graphs are recorded at
# the second, after a warm-up run of the compiled code.
_UNTIMED_STEPS = {None: 0, "default": 1, "max-autotune-no-cudagraphs": 1, "reduce-overhead": 2, "max-autotune": 2}


def untimed_steps(mode: str | None) -> int:
    """How many of a process's first steps a compiled model spends compiling (for
    :class:`~experiments.common.callbacks.StepTimer`): a resumed run compiles again."""
    return _UNTIMED_STEPS[mode]


ATTENTION = ("auto", "cudnn", "flash", "efficient", "math")


def add_attention_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--attention",
        choices=ATTENTION,
        default="auto",
        help="the attention kernel; auto: cuDNN's first on NVIDIA Hopper or newer, else PyTorch's order (FlashAttention-2 first)",
    )


def attention_kernels(choice: str, accelerator: str) -> contextlib.AbstractContextManager:
    """A context to train in with ``choice``'s attention kernels (``accelerator`` resolved).

    A named kernel is the only one allowed: a shape it cannot run is an error rather
    than a silent fall-back, so a comparison of kernels compares what it says. The
    choice is read when the model is traced (its first step), so the whole fit runs in it.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if choice == "auto":
        if accelerator != "gpu" or not _prefers_cudnn_attention():
            return contextlib.nullcontext()
        # The others stay behind it, in PyTorch's order, for the shapes cuDNN's kernels do not take.
        order = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
        return sdpa_kernel(order, set_priority=True)
    named = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
    named |= {"efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    return sdpa_kernel([named[choice]])


def attention_form(choice: str, accelerator: str) -> str:
    """What ``choice`` resolves to here, for metrics.json: ``cudnn``, ``flash``, ... or ``default`` (PyTorch's order)."""
    if choice == "auto":
        return "cudnn" if accelerator == "gpu" and _prefers_cudnn_attention() else "default"
    return choice


def _prefers_cudnn_attention() -> bool:
    if not torch.cuda.is_available() or torch.version.hip:
        return False
    return torch.cuda.get_device_capability(0) >= (9, 0) and torch.backends.cudnn.is_available()


def _fused_supported(params: Sequence[torch.Tensor]) -> bool:
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    supported = set(_get_fused_kernels_supported_devices())
    return bool(params) and all(p.device.type in supported and p.is_floating_point() for p in params)


def adamw(parameters: Iterable[torch.nn.Parameter], **options) -> torch.optim.AdamW:
    """AdamW, fused into one kernel per step where every parameter's device has one
    (CUDA and ROCm, CPU in torch >= 2.4), else the multi-tensor form."""
    params = [p for p in parameters if p.requires_grad]
    fused = _fused_supported(params)
    return torch.optim.AdamW(params, fused=fused, foreach=None if fused else True, **options)


def optimizer_form(optimizer: torch.optim.Optimizer) -> str:
    """How the optimizer steps, for metrics.json: ``AdamW fused`` or ``AdamW foreach``."""
    group = optimizer.param_groups[0]
    form = "fused" if group.get("fused") else "foreach" if group.get("foreach") else "for-loop"
    return f"{type(optimizer).__name__} {form}"


FP8 = "fp8"
_FP8_DEVICES = "NVIDIA compute capability 8.9 or newer (L4, L40S, H100, H200, B200) or AMD MI300 or newer"


def fp8_problems(accelerator: str) -> list[str]:
    """Why ``--precision fp8`` cannot run here (``accelerator`` resolved); empty when it can.

    A GPU asked for but missing is :func:`experiments.common.args.resolve_device`'s problem, not repeated here.
    """
    if accelerator != "gpu":
        return [f"--precision fp8 needs a GPU with FP8 matmuls: {_FP8_DEVICES}; this run is on CPU, where 32-true and bf16-mixed are valid"]
    if not torch.cuda.is_available():
        return []
    problems = []
    if not _has_fp8_matmuls():
        name = torch.cuda.get_device_name(0)
        problems.append(f"--precision fp8 needs a GPU with FP8 matmuls: {_FP8_DEVICES}; {name} has none, use bf16-mixed")
    if importlib.util.find_spec("torchao") is None:
        problems.append("--precision fp8 needs torchao (pip install 'orchestrator[fp8]', i.e. torchao==0.18.0)")
    return problems


def _has_fp8_matmuls() -> bool:
    if torch.version.hip:
        return torch.cuda.get_device_properties(0).gcnArchName.startswith(("gfx94", "gfx95"))  # MI300, MI325, MI350
    return torch.cuda.get_device_capability(0) >= (8, 9)


def trainer_precision(precision: str) -> str:
    """Lightning's precision for the run's: fp8's linears cast themselves, the rest runs in bf16-mixed."""
    return "bf16-mixed" if precision == FP8 else precision


def float8_in_place(net: torch.nn.Module) -> int:
    """Swap ``net``'s Linear layers for torchao's Float8Linear; the number swapped.

    Only those whose sides divide by 16, as FP8 matmuls need. Float8Linear is a Linear
    with the same parameters, so the state-dict keys (the checkpoints) do not change.
    Call before compiling: the casts and scales are meant to fuse into the kernels.
    """
    from torchao.float8 import convert_to_float8_training

    def fits(module: torch.nn.Module, name: str) -> bool:
        # torchao passes every Linear here (the filter sees only Linears).
        assert isinstance(module, torch.nn.Linear)
        return module.in_features % 16 == 0 and module.out_features % 16 == 0

    convert_to_float8_training(net, module_filter_fn=fits)
    return sum(type(m).__name__ == "Float8Linear" for m in net.modules())
