"""Per-step curves for ``dvc plots``: DVCLive's Lightning logger, fitted for timed runs.

Imported only when a run starts (dvclive brings DVC in). Only global rank 0 ever
creates the ``Live`` object behind the logger.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from dvclive.lightning import DVCLiveLogger


class PlotsLogger(DVCLiveLogger):
    def __init__(self, directory: Path):
        # The pipeline owns dvc.yaml and the experiments: DVCLive must never edit
        # the one nor save the other.
        super().__init__(dir=str(directory), dvcyaml=False, save_dvc_exp=False)

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        # sync=True: DVCLive would otherwise decide by calling inspect.stack() on
        # every call, tens to hundreds of milliseconds inside the timed steps;
        # Lightning calls this only from the places where that check answers yes.
        # step + 1: Lightning counts from 0, which DVCLive reads as "no step" (the
        # first two points both landed on step 1); now a point sits at the number
        # of optimizer steps done.
        self._studio_off()
        super().log_metrics(metrics, None if step is None else step + 1, sync=True)

    def _studio_off(self) -> None:
        # Without DVC Studio, DVCLive's sync still re-reads params.yaml and every
        # curve to build a post it then drops: ~6 ms a call, 8% of the tiny LM's CPU
        # step when it logs every step (benchmarks/lightning_overhead.py). Only rank
        # 0 has a Live; the others' experiment is a dummy.
        skipped = getattr(self.experiment, "_studio_events_to_skip", None)
        if isinstance(skipped, set) and "data" in skipped:
            self.experiment.post_data_to_studio = lambda: None
