"""Slurm time limits (``--time``): parse and compare without a cluster."""

from __future__ import annotations

import re

_FORMS = (
    (re.compile(r"(\d+)-(\d+):(\d+):(\d+)"), ("d", "h", "m", "s")),
    (re.compile(r"(\d+)-(\d+):(\d+)"), ("d", "h", "m")),
    (re.compile(r"(\d+)-(\d+)"), ("d", "h")),
    (re.compile(r"(\d+):(\d+):(\d+)"), ("h", "m", "s")),
    (re.compile(r"(\d+):(\d+)"), ("m", "s")),
    (re.compile(r"(\d+)"), ("m",)),
)
_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
FORMS_HELP = "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"


def seconds(text: str) -> int:
    """Seconds in a Slurm time limit such as ``2-00:00:00``; ValueError if malformed."""
    s = str(text).strip()
    for pattern, units in _FORMS:
        m = pattern.fullmatch(s)
        if m:
            return sum(int(v) * _SECONDS[u] for v, u in zip(m.groups(), units, strict=True))
    raise ValueError(f"{text!r} is not a Slurm time ({FORMS_HELP})")


def is_valid(text: str) -> bool:
    try:
        seconds(text)
    except ValueError:
        return False
    return True


def hms(seconds: int | None) -> str:
    """``3723`` -> ``1:02:03``; ``-`` for unknown."""
    if seconds is None:
        return "-"
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}"
