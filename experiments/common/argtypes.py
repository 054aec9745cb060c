"""Argument types that need no torch: sizes and whole numbers, for the command lines of data
preparation (experiments.lm.prepare, on CPU nodes) and of the corpus benchmark
(benchmarks/make_corpus.py), which must stay quick to start and free of the training stack.
The training commands' own types are in :mod:`experiments.common.args`."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

_SIZE = re.compile(r"(\d+(?:\.\d+)?)([KMGT]?)", re.IGNORECASE)
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}  # powers of 1,024, as du and ls -h count


def parse_size(text: str) -> int:
    """Bytes, or a number with K, M, G or T (``64M``, ``1.5G``): at least one byte."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: give bytes, or a number with K, M, G or T (e.g. 64M, 2G)")
    value = int(float(match.group(1)) * UNITS[match.group(2).upper()])
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: the size must be at least 1 byte")
    return value


def whole(minimum: int, why: str) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``minimum`` (``why`` says what it is when below)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r}: {why}")
        return value

    return parse


positive = whole(1, "must be at least 1")
