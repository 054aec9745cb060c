"""Arguments the experiments' command lines share: their types, and the device settings' defaults."""

from __future__ import annotations

import argparse
import os

import torch

# The orchestrator's plan writes where an item runs into its script (never `auto`, so
# that a matrix's items all run on one kind of device); it is --accelerator's default.
ACCELERATOR_VAR = "ORCH_ACCELERATOR"


def positive(text: str) -> int:
    """An integer of at least 1 (counts of nodes, devices, steps, sequences)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def non_negative(text: str) -> int:
    """An integer of at least 0 (0 where it means "all" or "none")."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def add_accelerator(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--accelerator",
        choices=("auto", "cpu", "gpu"),
        help=f"where the processes run; default ${ACCELERATOR_VAR} (set by the orchestrator), else auto (gpu when torch sees one)",
    )


def resolve_device(args: argparse.Namespace) -> list[str]:
    """Settle ``--accelerator`` (cpu or gpu) and the default ``--precision`` (bf16-mixed on
    GPU, 32-true on CPU) in ``args``; the problems found, for one usage error."""
    problems = []
    if args.accelerator is None:
        chosen = os.environ.get(ACCELERATOR_VAR, "").strip()
        if chosen and chosen not in ("cpu", "gpu"):
            problems.append(f"{ACCELERATOR_VAR}={chosen!r} is not a device; valid: cpu, gpu (or unset it)")
        args.accelerator = chosen if chosen in ("cpu", "gpu") else "auto"
    if args.accelerator == "auto":
        args.accelerator = "gpu" if torch.cuda.is_available() else "cpu"
    if args.accelerator == "gpu":
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if not visible:
            problems.append(
                "GPUs asked for (--accelerator gpu or ORCH_ACCELERATOR=gpu), but torch sees none here "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!r}, torch {torch.__version__}); "
                "run where GPUs are, or pass --accelerator cpu"
            )
        elif args.devices > visible:
            problems.append(f"--devices {args.devices} GPUs per node, but torch sees {visible} here; pass --devices {visible} or fewer")
    args.precision = args.precision or ("bf16-mixed" if args.accelerator == "gpu" else "32-true")
    return problems
