"""Following submitted jobs from the workspace: an item's log as the job writes it, the items a
recording job leaves for a later wave, and the points of a sweep that `status --sweep` shows.

Reads the ledger, the logs and the sweep's record; what is printed, and how, is the CLI's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.jobs import ledger
from orchestrator.jobs import status as st
from orchestrator.jobs.recorder import RECORD_ITEM
from orchestrator.util.poll import Backoff, Clock, Poller
from orchestrator.util.runner import Runner

if TYPE_CHECKING:
    from orchestrator.jobs.sweep import Sweep

# How long `logs --follow` waits between reads: from half a second, up by half each time, to ten.
_IDLE = Backoff(first_s=0.5, factor=1.5, max_s=10.0)


def log(project: Path, item: str, runner: Runner, follow: bool, write: Callable[[str], None], clock: Clock | None = None) -> bool:
    """Write ITEM's newest log through ``write`` from its start; with ``follow``, what the job
    appends too, until the job has ended and everything is written. False: there is no log
    (and not following, so nothing to wait for)."""
    path = st.log_path(project, item)
    offset, poller = 0, Poller(_IDLE, clock=clock)
    while True:
        if path.exists():
            with path.open("rb") as f:
                f.seek(offset)
                chunk = f.read()
            offset += len(chunk)
            write(chunk.decode(errors="replace"))
        if not follow:
            return path.exists()
        (row,) = st.refresh(project, runner, [item])
        if row.state.final and path.exists() and path.stat().st_size == offset:
            return True
        poller.sleep()  # no deadline or count: it always sleeps


def waiting(project: Path, row: st.StatusRow) -> int:
    """How many items the recording job of ``row`` leaves for later waves (0: it is no such job)."""
    if row.item != RECORD_ITEM and not row.item.startswith("orchestrator:sweep:"):
        return 0
    rec = next((r for r in reversed(ledger.Ledger(project).records(row.item)) if r.job_id == row.job_id), None)
    return int(rec.provenance.get("waiting", 0)) if rec else 0


def open_points(project: Path, name: str) -> tuple[Sweep, list[tuple[Path, str]]]:
    """Sweep ``name`` and the folder and name of each of its points not yet saved as an experiment
    (and still there): whose items `status --sweep` lists."""
    from orchestrator.jobs.sweep import Sweep  # only `status --sweep` reads a sweep

    made = Sweep.load(project, name)
    return made, [(project / p.folder, p.name) for p in made.points if not p.saved and (project / p.folder).is_dir()]
