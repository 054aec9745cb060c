"""Argument types the experiments' command lines share."""

from __future__ import annotations

import argparse


def positive(text: str) -> int:
    """An integer of at least 1 (counts of nodes, devices, steps, sequences)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value
