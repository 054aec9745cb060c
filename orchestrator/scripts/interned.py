"""Values many plans share, kept once.

The parts of a plan that items of one layout have in common (binding masks, the
environment, the container call: 9 kB of a plan's 10) are kept once, so a matrix of
100,000 plans costs what its distinct layouts cost, not 100,000 copies. Bounded, so a
long-lived process (a notebook, the test suite) never grows without end.
"""

from __future__ import annotations

from typing import TypeVar

_SHARED: dict = {}
_T = TypeVar("_T")
_SHARED_MAX = 4096


def shared(value: _T) -> _T:
    """``value``, or an equal one kept earlier."""
    if len(_SHARED) >= _SHARED_MAX:
        _SHARED.clear()
    return _SHARED.setdefault(value, value)
