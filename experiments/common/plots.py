"""Per-step curves for ``dvc plots``: DVCLive's Lightning logger, fitted for timed runs.

Imported only when a run starts (dvclive brings DVC in). Only global rank 0 ever
creates the ``Live`` object behind the logger.

Two changes to DVCLive's logger, both for what a training run needs:

- Points are buffered and written every ``flush_every_s`` seconds and when the
  run ends (Lightning's ``finalize``, also after the requeue checkpoint), each
  curve's rows in one append. DVCLive writes every point as it comes (an open,
  append and close per curve, then metrics.json): 0.7 ms per logged step here,
  about 1% of the tiny LM's CPU step (benchmarks/lightning_overhead.py); here
  0.06 ms. Values may stay tensors until then (experiments.common.callbacks.log_step).
- A resumed run keeps the curves it had. DVCLive would delete them (its
  ``resume`` would keep them but also keep points past the checkpoint, which the
  resumed run logs again). Here the first point a run writes drops every
  stored point at or after its step, so each step appears once, with the value
  of the run that the final weights descend from.
"""

from __future__ import annotations

import csv
import math
import os
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dvclive.lightning import DVCLiveLogger
from dvclive.plots import Metric
from dvclive.utils import standardize_metric_name
from lightning_utilities.core.rank_zero import rank_zero_only

FLUSH_EVERY_S = 10.0


class PlotsLogger(DVCLiveLogger):
    def __init__(self, directory: Path, resume: bool = False, flush_every_s: float = FLUSH_EVERY_S):
        # The pipeline owns dvc.yaml and the experiments: DVCLive must never edit
        # the one nor save the other.
        super().__init__(dir=str(directory), dvcyaml=False, save_dvc_exp=False, resume=resume)
        self.flush_every_s = flush_every_s
        self._pending: list[tuple[int, dict[str, Any]]] = []  # numbers, or tensors and the like (an item())
        self._flushed_at = time.monotonic()
        self._truncated = False  # stored curves are cut back to the first new point, once

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, object], step: int | None = None) -> None:
        # step + 1: Lightning counts from 0, which DVCLive reads as "no step" (the
        # first two points both landed on step 1); a point sits at the number of
        # optimizer steps done. Values may be tensors: they are read when written.
        if step is None:  # not from Lightning's trainer: the next step, as DVCLive counts
            step = self._pending[-1][0] if self._pending else self.experiment.step
        self._pending.append((step + 1, dict(metrics)))
        if time.monotonic() - self._flushed_at >= self.flush_every_s:
            self.flush()

    @rank_zero_only
    def finalize(self, status: str) -> None:
        self.flush()
        super().finalize(status)

    def flush(self) -> None:
        """Write the buffered points: each curve's new rows in one append, then DVCLive's summary."""
        self._flushed_at = time.monotonic()
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        live = self.experiment
        rows: dict[str, list[tuple[int, float | str]]] = defaultdict(list)
        for step, metrics in pending:
            live.step = step
            for key, value in metrics.items():
                name = standardize_metric_name(key, "dvclive.lightning")
                # Tensors (from experiments.common.callbacks.log_step) are read only now: on GPUs one sync per flush.
                number = value.item() if hasattr(value, "item") else value
                live.log_metric(name, number, plot=False)  # the summary (metrics.json) and DVCLive's checks
                rows[name].append((step, _plain(number)))
        if not self._truncated:
            _cut_curves(Path(live.plots_dir) / Metric.subfolder, before=pending[0][0])
            self._truncated = True
        for name, points in rows.items():
            # The rows DVCLive's Metric.dump writes (tab-separated, "step" then the
            # curve's last name part, os.linesep), many at once.
            with Metric(name, live.plots_dir).output_path.open("a", encoding="utf-8", newline="") as f:
                writer = csv.writer(f, delimiter="\t", lineterminator=os.linesep)
                if f.tell() == 0:
                    writer.writerow(["step", os.path.basename(name)])
                writer.writerows(points)
        self._studio_off()
        live.sync()

    def _studio_off(self) -> None:
        # Without DVC Studio, DVCLive's sync still re-reads params.yaml and every
        # curve to build a post it then drops: ~6 ms a call. Only rank 0 has a
        # Live; the others' experiment is a dummy.
        skipped = getattr(self.experiment, "_studio_events_to_skip", None)
        if isinstance(skipped, set) and "data" in skipped:
            self.experiment.post_data_to_studio = lambda: None


def _cut_curves(folder: Path, before: int) -> None:
    """Drop the stored points at or after step ``before`` (a resumed run logs them again), each curve swapped in whole."""
    for path in folder.rglob("*.tsv"):
        with path.open(newline="", encoding="utf-8") as f:
            header, *rows = list(csv.reader(f, delimiter="\t")) or [[]]
        kept = [row for row in rows if row and int(row[0]) < before]
        if len(kept) < len(rows):
            partial = path.with_name(path.name + ".partial")
            with partial.open("w", encoding="utf-8", newline="") as f:
                csv.writer(f, delimiter="\t", lineterminator=os.linesep).writerows([header, *kept])
            os.replace(partial, path)


def _plain(value: float | str) -> float | str:
    # As DVCLive's Metric.dump: NaN and infinities are written as text.
    return value if isinstance(value, str) or math.isfinite(value) else str(value)
