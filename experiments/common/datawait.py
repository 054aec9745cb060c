"""How much of the training loop's time goes to waiting for the next batch, and how long a
run takes to reach its first step (what a corpus's size must not change)."""

from __future__ import annotations

import os
import time

import pytorch_lightning as pl

from experiments.common.callbacks import WarmUp


class DataWait(pl.Callback):
    """The share of the loop's time spent between one step's end and the next step's start.

    That gap is where Lightning fetches the next batch from the loader (and moves
    it to the device), plus its own bookkeeping between steps; the steps are the
    time from ``on_train_batch_start`` to ``on_train_batch_end``. Counted after the
    warm-up, as :class:`~experiments.common.callbacks.StepTimer` times. Put it last in
    the trainer's callbacks, so that the other callbacks' batch-end work (e.g. the
    requeue check's all-reduce) counts as step time, not as waiting.

    Host clocks, no device synchronisation (that would change what it measures):
    on a GPU a fetch that overlaps kernels still queued is counted though the
    GPU was busy, so there the share is an upper bound on the GPU's idle time.
    """

    def __init__(self, warmup_steps: int, untimed_steps: int = 0):
        self.warmup = WarmUp(warmup_steps, untimed_steps)
        self.wait_s = 0.0
        self.step_s = 0.0
        self.gaps = 0  # waits counted: one fewer than the steps
        self._start: float | None = None
        self._end: float | None = None  # the previous counted step's end
        self.first_step_s: float | None = None  # from the process's start to its first step's

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int) -> None:
        now = time.perf_counter()
        if self.first_step_s is None:
            self.first_step_s = process_age_s()
        if not self.warmup.over(trainer):
            return
        if self._end is not None:
            self.wait_s += now - self._end
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

    @property
    def share(self) -> float | None:
        """Waiting over waiting plus steps; None before two steps were counted."""
        return self.wait_s / (self.wait_s + self.step_s) if self.gaps else None


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
