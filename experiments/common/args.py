"""Arguments the experiments' command lines share: their types, and the device settings' defaults."""

from __future__ import annotations

import argparse

import torch


def positive(text: str) -> int:
    """An integer of at least 1 (counts of nodes, devices, steps, sequences)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def resolve_device(args: argparse.Namespace) -> None:
    """Settle ``--accelerator auto`` (gpu when CUDA is available, else cpu) and the default ``--precision``
    (bf16-mixed on GPU, 32-true on CPU) in ``args``."""
    if args.accelerator == "auto":
        args.accelerator = "gpu" if torch.cuda.is_available() else "cpu"
    args.precision = args.precision or ("bf16-mixed" if args.accelerator == "gpu" else "32-true")
