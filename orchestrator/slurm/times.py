"""Slurm time limits (``--time``, a partition's ``MaxTime``): parse and compare without a cluster.

Exactly the forms sbatch documents: ``minutes``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``,
``D-HH:MM`` and ``D-HH:MM:SS``, plus ``UNLIMITED`` / ``INFINITE`` (no limit, as a
partition's maximum says it). The leading field may be any size; a field after it
must fit its unit (minutes and seconds below 60, hours after a day below 24), so a
typo such as ``25:99:99`` is rejected instead of meaning something unintended.
"""

from __future__ import annotations

import math
import re

# ASCII digits only: Python's \d also matches other scripts' digits, which Slurm does not read.
_N = r"([0-9]{1,10})"
_FORMS = (
    (re.compile(rf"{_N}-{_N}:{_N}:{_N}"), ("d", "h", "m", "s")),
    (re.compile(rf"{_N}-{_N}:{_N}"), ("d", "h", "m")),
    (re.compile(rf"{_N}-{_N}"), ("d", "h")),
    (re.compile(rf"{_N}:{_N}:{_N}"), ("h", "m", "s")),
    (re.compile(rf"{_N}:{_N}"), ("m", "s")),
    (re.compile(_N), ("m",)),
)
_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_BELOW = {"h": 24, "m": 60, "s": 60}  # for a field that is not the leading one
# Slurm keeps a limit in minutes in 32 bits, the largest value meaning "no limit".
_MAX_MINUTES = 2**32 - 2
UNLIMITED_WORDS = ("UNLIMITED", "INFINITE")
FORMS_HELP = "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS, e.g. 90, 01:30:00 or 2-00:00:00"


def seconds(text: str) -> float:
    """Seconds in a Slurm time limit such as ``2-00:00:00`` (``math.inf`` for ``UNLIMITED``);
    ValueError naming the text and the valid forms if it is not one."""
    s = str(text)
    if s.upper() in UNLIMITED_WORDS:
        return math.inf
    for pattern, units in _FORMS:
        m = pattern.fullmatch(s)
        if m:
            return _total(s, [int(v) for v in m.groups()], units)
    raise ValueError(f"{_show(s)} is not a Slurm time ({FORMS_HELP})")


def _total(text: str, values: list[int], units: tuple[str, ...]) -> int:
    for value, unit in list(zip(values, units, strict=True))[1:]:
        if value >= _BELOW[unit]:
            what = {"h": "hours after a day", "m": "minutes", "s": "seconds"}[unit]
            raise ValueError(f"{_show(text)} is not a Slurm time: {what} must be below {_BELOW[unit]} ({FORMS_HELP})")
    total = sum(v * _SECONDS[u] for v, u in zip(values, units, strict=True))
    if total > _MAX_MINUTES * 60:
        raise ValueError(f"{_show(text)} is longer than Slurm can hold ({_MAX_MINUTES} minutes); for no limit leave --time out")
    return total


def _show(text: str) -> str:
    """The input as a message quotes it: repr (control characters visible), cut when long."""
    return repr(text) if len(text) <= 60 else f"{text[:60]!r}... ({len(text)} characters)"


def problem(text: str) -> str | None:
    """What is wrong with ``text`` as a Slurm time limit (None: nothing)."""
    try:
        seconds(text)
    except ValueError as exc:
        return str(exc)
    return None


def is_valid(text: str) -> bool:
    return problem(text) is None


def is_finite(text: str) -> bool:
    """A valid limit that is not UNLIMITED/INFINITE (what a job's own --time must be)."""
    try:
        return seconds(text) < math.inf
    except ValueError:
        return False


def hms(seconds: int | None) -> str:
    """``3723`` -> ``1:02:03``; ``-`` for unknown."""
    if seconds is None:
        return "-"
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}"
