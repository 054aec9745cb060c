"""What makes a step fast on a GPU: the model compiled, and the fused optimizer.

``torch.compile`` turns the model's many small kernels (LayerNorm, GELU, residual adds,
the attention reshapes) into a few fused ones; measured on one H100 with the LM's
`large` model it took MFU from 0.36-0.39 to 0.44-0.47. It is applied with
``nn.Module.compile()``, in place, so the module keeps its own state-dict keys:
checkpoints of compiled and uncompiled runs are the same and load into each other
(``torch.compile(module)`` would wrap it and prefix every key with ``_orig_mod.``).
Compiling happens at the first step, which the step timer leaves out (its warm-up).

On CPU it is off by default: the shipped pipeline's few steps on two cores would spend
longer compiling than training. The same defaults hold on ROCm: nothing here is
NVIDIA-only (Inductor emits Triton for both).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable

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


def _fused_supported(params: list[torch.Tensor]) -> bool:
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
