"""How much of the training loop's time goes to waiting for the next batch, and how long a
run takes to reach its first step (what a corpus's size must not change)."""

from __future__ import annotations

import os
import time

import pytorch_lightning as pl

from experiments.common.callbacks import WarmUp
from experiments.common.timedloader import TimedLoader


class DataWait(pl.Callback):
    """Where the training loop's time goes between one step's end and the next step's start.

    That gap holds the fetch of the next batch from the loader and its move to the
    device (the data wait), and Lightning's own work between steps: logging, and on
    several processes a broadcast that waits for the slowest rank (the gap share).
    With a :class:`TimedLoader` as the training loader the two are told apart: the
    data wait is the loader's time inside the gap plus the time from its last batch
    to the step's start (the transfer); with another loader the data wait is the
    whole gap, an upper bound. The steps are the time from ``on_train_batch_start``
    to ``on_train_batch_end``. Counted after the warm-up, as
    :class:`~experiments.common.callbacks.StepTimer` times. Put it last in the
    trainer's callbacks, so that the other callbacks' batch-end work (e.g. the
    requeue check's all-reduce) counts as step time, not as waiting.

    Host clocks, no device synchronisation (that would change what it measures):
    on a GPU a fetch that overlaps kernels still queued is counted though the
    GPU was busy, so there the share is an upper bound on the GPU's idle time.
    """

    def __init__(self, warmup_steps: int, untimed_steps: int = 0):
        self.warmup = WarmUp(warmup_steps, untimed_steps)
        self.wait_s = 0.0  # waiting for data, inside the gaps
        self.gap_s = 0.0  # the whole gaps
        self.step_s = 0.0
        self.gaps = 0  # gaps counted: one fewer than the steps
        self._start: float | None = None
        self._end: float | None = None  # the previous counted step's end
        self._fetch_s_at_end = 0.0  # the loader's fetch_s then
        self.first_step_s: float | None = None  # from the process's start to its first step's

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int) -> None:
        now = time.perf_counter()
        if self.first_step_s is None:
            self.first_step_s = process_age_s()
        if not self.warmup.over(trainer):
            return
        if self._end is not None:
            gap = now - self._end
            loader = getattr(trainer, "train_dataloader", None)
            if isinstance(loader, TimedLoader) and loader.fetched_at is not None:
                transfer = now - max(loader.fetched_at, self._end)
                self.wait_s += min(gap, loader.fetch_s - self._fetch_s_at_end + transfer)
            else:
                self.wait_s += gap
            self.gap_s += gap
            self.gaps += 1
        self._start = now

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: object, batch: object, batch_idx: int
    ) -> None:
        if self._start is None:
            return
        now = time.perf_counter()
        self.step_s += now - self._start
        self._end = now
        loader = getattr(trainer, "train_dataloader", None)
        self._fetch_s_at_end = loader.fetch_s if isinstance(loader, TimedLoader) else 0.0

    @property
    def share(self) -> float | None:
        """Waiting for data over the loop's time (gaps plus steps); None before two steps were counted."""
        return self.wait_s / (self.gap_s + self.step_s) if self.gaps else None

    @property
    def gap_share(self) -> float | None:
        """The whole gaps (data wait included) over the loop's time; None before two steps were counted."""
        return self.gap_s / (self.gap_s + self.step_s) if self.gaps else None


def process_age_s() -> float | None:
    """Seconds since this process started, from /proc (its start in clock ticks after boot);
    None where there is no /proc. Python's own start-up and imports count: they are part of
    what a job waits for before it trains."""
    try:
        with open("/proc/self/stat") as f:
            # The command name (field 2) may hold spaces: count the fields after its ")".
            started_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime_s = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return uptime_s - started_ticks / os.sysconf("SC_CLK_TCK")
