"""Waiting for something that changes on its own (a job, a file): one poller for every such wait.

A :class:`Backoff` says how the wait between looks grows (first, times a factor, up to a
most); a :class:`Poller` sleeps those waits in turn on a :class:`Clock` (injectable, so
tests of waiting do not wait), until a deadline or a number of waits is used up.

The environment may shorten the waits (the tests and the benchmarks do):
``ORCH_POLL_FIRST_S`` and ``ORCH_POLL_MAX_S``, read and checked here only
(:func:`seconds_setting`); a bad value is a :class:`~orchestrator.errors.ConfigError`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.errors import ConfigError

FIRST_ENV = "ORCH_POLL_FIRST_S"  # the first wait between looks
MAX_ENV = "ORCH_POLL_MAX_S"  # the longest wait between looks
_MOST_S = 86400.0  # a setting above a day is a typo, not a wish


@dataclass
class Clock:
    """Time and sleep, injectable so tests of waiting do not wait."""

    now: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep


def seconds_setting(name: str, default: float) -> float:
    """The environment variable ``name`` as seconds (over 0, at most a day), ``default`` where unset;
    ConfigError, naming it, for anything else."""
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= _MOST_S:  # also false for nan
        raise ConfigError(
            f"environment variable {name}={text[:80]!r} is not a number of seconds between 0 and {_MOST_S:g}",
            hints=[f"unset it (default {default:g}) or set a positive number, e.g. {name}={default:g}"],
        )
    return value


@dataclass(frozen=True)
class Backoff:
    """The waits between looks: ``first_s``, then each ``factor`` times the one before, at most ``max_s``."""

    first_s: float = 1.0
    factor: float = 2.0
    max_s: float = 60.0

    @classmethod
    def from_environment(cls, first_s: float, factor: float, max_s: float) -> Backoff:
        """These waits, the first and the longest replaced by ``ORCH_POLL_FIRST_S`` and ``ORCH_POLL_MAX_S`` where set."""
        return cls(seconds_setting(FIRST_ENV, first_s), factor, seconds_setting(MAX_ENV, max_s))

    def nth(self, n: int) -> float:
        """The ``n``-th wait (0: the first)."""
        return self.first_s if n <= 0 else min(self.first_s * self.factor**n, self.max_s)

    def waits(self, count: int) -> tuple[float, ...]:
        return tuple(self.nth(n) for n in range(count))


class Poller:
    """Sleeps a :class:`Backoff`'s waits in turn: ``while poller.sleep(): look()``.

    :meth:`sleep` is False, without sleeping, once ``deadline_s`` (from the poller's start, on
    its clock) has passed or ``tries`` waits have been slept; without either it never is."""

    def __init__(self, backoff: Backoff, *, clock: Clock | None = None, deadline_s: float | None = None, tries: int | None = None) -> None:
        self.backoff = backoff
        self.clock = clock or Clock()
        self.deadline_s = deadline_s
        self.tries = tries
        self.started = self.clock.now()
        self.slept = 0
        self.next_s = backoff.first_s  # what the next sleep waits

    @property
    def expired(self) -> bool:
        out_of_time = self.deadline_s is not None and self.clock.now() - self.started >= self.deadline_s
        return out_of_time or (self.tries is not None and self.slept >= self.tries)

    def sleep(self) -> bool:
        """Wait the next wait (growing the one after); False, at once, when the poller has expired."""
        if self.expired:
            return False
        self.clock.sleep(self.next_s)
        self.slept += 1
        self.next_s = min(self.next_s * self.backoff.factor, self.backoff.max_s)
        return True
