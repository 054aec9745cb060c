"""Following submitted jobs: status of many at once, their logs, cancelling them.

The ledger says which jobs exist; one scheduler query per refresh says how they
are (never one per job), and the answers are written back to the ledger.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import OrchestratorError
from orchestrator.jobs import backends, ledger
from orchestrator.slurm import commands, reasons
from orchestrator.slurm.states import JobInfo, State
from orchestrator.util.runner import Runner


@dataclass(frozen=True)
class StatusRow:
    item: str
    state: State
    job_id: str
    nodes: str
    elapsed_s: int | None
    exit_code: int | None
    log: str | None
    submissions: int
    mfu: float | None = None  # of a finished run that reports model FLOPs
    avoiding: tuple[str, ...] = ()  # nodes the newest job was told to avoid after node faults
    node_faults: int = 0  # jobs of the newest job's fingerprint that hit a node fault (each was run again)
    reason: str | None = None  # why a pending job waits, as Slurm says
    stuck: str | None = None  # what to do about a job that will not start by itself
    recovered: str | None = None  # the ledger file was damaged: where it went, what was wrong


@dataclass(frozen=True)
class ArraySummary:
    """The tasks of one job array among the rows: how many, in which states."""

    array_id: str
    tasks: int
    counts: dict[str, int]  # state -> tasks in it
    items: str  # "first ... last"

    @property
    def states(self) -> str:
        return ", ".join(f"{n} {state}" for state, n in sorted(self.counts.items(), key=lambda kv: -kv[1]))


def summaries(rows: Sequence[StatusRow]) -> list[ArraySummary]:
    """One summary per job array whose tasks are among ``rows`` (an item's newest job is a task)."""
    by_array: dict[str, list[StatusRow]] = {}
    for row in rows:
        if "_" in row.job_id:
            by_array.setdefault(commands.array_of(row.job_id), []).append(row)
    found = []
    for array_id, members in by_array.items():
        counts: dict[str, int] = {}
        for row in members:
            counts[row.state.value] = counts.get(row.state.value, 0) + 1
        items = members[0].item if len(members) == 1 else f"{members[0].item} ... {members[-1].item}"
        found.append(ArraySummary(array_id, len(members), counts, items))
    return found


def _recovery_note(recovery: ledger.Recovery | None) -> str | None:
    if recovery is None:
        return None
    found = f"; Slurm named job {recovery.found}" if recovery.found else ("; Slurm knew no job of it" if recovery.checked else "")
    return f"recovered ({recovery.problem}; damaged file kept as {recovery.damaged}{found})"


def latest(root: Path, targets: Sequence[str] = ()) -> dict[str, ledger.Record]:
    """The newest record of every item (matching ``targets``: names, stages or globs)."""
    return {item: h.records[-1] for item, h in _histories(root, targets).items() if h.records}


def _histories(root: Path, targets: Sequence[str]) -> dict[str, ledger.ItemLedger]:
    """The ledgers of the items matching ``targets`` (records oldest first)."""
    items = ledger.Ledger(root).items()
    chosen = {item: history for item, history in items.items() if _matches(item, targets)}
    if targets and not chosen:
        raise OrchestratorError(
            f"no submitted item matches {', '.join(targets)}", hints=[f"items in the ledger: {', '.join(sorted(items)) or '(none)'}"]
        )
    return chosen


def _matches(item: str, targets: Sequence[str]) -> bool:
    return not targets or any(t in (item, item.split("@", 1)[0]) or fnmatch.fnmatchcase(item, t) for t in targets)


def departed(rows: Sequence[StatusRow], items: Sequence[str] | None) -> tuple[list[StatusRow], list[StatusRow]]:
    """(rows to show, ended rows of items no longer in the pipeline): the ledger keeps an item that
    left the matrix, and listing its old job round after round reads as if it were still part of
    the project. One whose job still runs stays (something of it is still going on); the
    orchestrator's own rows (``orchestrator:record``) are no items. ``items``: the pipeline's
    item names; None where they are not known (nothing is left out then)."""
    if items is None:
        return list(rows), []
    known = set(items)
    gone = [r for r in rows if r.item not in known and not r.item.startswith("orchestrator:") and not r.state.active]
    return [r for r in rows if r not in gone], gone


def refresh(root: Path, runner: Runner, targets: Sequence[str] = ()) -> list[StatusRow]:
    """Current state of the items' newest jobs: one sacct call for all Slurm jobs."""
    histories = _histories(root, targets)
    return _rows(root, "", histories, _query(root, runner, [histories]))


def refresh_all(workspaces: Sequence[tuple[Path, str]], runner: Runner) -> list[StatusRow]:
    """:func:`refresh` of several workspaces (a sweep's copies), one sacct call for all;
    each workspace's rows have its label before their item names."""
    histories = [_histories(root, ()) for root, _ in workspaces]
    found = _query(workspaces[0][0], runner, histories) if workspaces else {}
    return [row for (root, label), hs in zip(workspaces, histories, strict=True) for row in _rows(root, label, hs, found)]


def _query(root: Path, runner: Runner, histories: Sequence[dict[str, ledger.ItemLedger]]) -> dict[str, JobInfo]:
    newest = [h.records[-1] for hs in histories for h in hs.values() if h.records]
    live = [r.job_id for r in newest if r.backend == "slurm" and not r.state.final]
    if not live:
        return {}
    try:
        return backends.SbatchBackend(root, runner, None).query(live)
    except backends.SchedulerError:
        return {}  # show what the ledger knows; the next refresh asks again


def _rows(root: Path, label: str, histories: dict[str, ledger.ItemLedger], found: dict[str, JobInfo]) -> list[StatusRow]:
    records = {item: history.records[-1] for item, history in histories.items() if history.records}
    book = ledger.Ledger(root)
    peaks: dict[str, float | None] = {}
    rows = [
        StatusRow(item, State.UNKNOWN, "-", "-", None, None, None, 0, recovered=_recovery_note(h.recovery))
        for item, h in histories.items()
        if not h.records
    ]
    for item, rec in sorted(records.items()):
        info = found.get(rec.job_id)
        if info is not None and (info.state != rec.state or info.elapsed_s != rec.elapsed_s):
            with book.locked(item) as entries:
                rec = entries.update(
                    rec.job_id,
                    state=info.state,
                    exit_code=info.exit_code,
                    nodelist=info.nodelist or rec.nodelist,
                    nodes=info.nodes or rec.nodes,
                    elapsed_s=info.elapsed_s,
                )
        history = histories[item].records
        faulted = [r for r in history if r.fingerprint == rec.fingerprint and r.fault]
        blocked = reasons.stuck(info) if info is not None else None
        rows.append(
            StatusRow(
                item,
                rec.state,
                rec.job_id,
                rec.nodelist or (str(rec.nodes) if rec.nodes else "-"),
                rec.elapsed_s,
                rec.exit_code,
                rec.log,
                len(history),
                mfu=_mfu(root, rec, peaks),
                avoiding=rec.excluded,
                node_faults=len(faulted),
                reason=info.reason if info is not None and info.state == State.PENDING else None,
                stuck=blocked.what_to_do if blocked else None,
                recovered=_recovery_note(histories[item].recovery),
            )
        )
    rows = sorted(rows, key=lambda r: r.item)
    return [dataclasses.replace(r, item=f"{label} {r.item}") for r in rows] if label else rows


def _mfu(root: Path, rec: ledger.Record, peaks: dict[str, float | None]) -> float | None:
    """MFU of a finished run, as the report computes it (the profile's peak, else the
    run's own); ``peaks`` keeps each profile's peak, loaded once per refresh."""
    if rec.state != State.COMPLETED or not rec.metrics:
        return None
    from orchestrator.analysis import mfu
    from orchestrator.config import profile

    if rec.profile not in peaks:
        try:
            gpu = profile.load(rec.profile).profile.node.gpu
            peaks[rec.profile] = gpu.peak_tflops_bf16 if gpu else None
        except OrchestratorError:
            peaks[rec.profile] = None  # a profile file since moved: the run's own figure still counts
    for path in rec.metrics:
        try:
            data = json.loads((root / path).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            value, _ = mfu.mfu(data, peaks[rec.profile], rec.profile)
            if value is not None:
                return value
    return None


def cancel(root: Path, runner: Runner, targets: Sequence[str] = ()) -> list[str]:
    """Cancel the active Slurm jobs of the items (one scancel); returns their ids."""
    records = latest(root, targets)
    active = {item: r for item, r in records.items() if r.backend == "slurm" and r.state.active}
    if active:
        backends.SbatchBackend(root, runner, None).cancel([r.job_id for r in active.values()])
    book = ledger.Ledger(root)
    for item, rec in active.items():
        with book.locked(item) as entries:
            entries.update(rec.job_id, state=State.CANCELLED)
    return [r.job_id for r in active.values()]


def one(root: Path, item: str) -> ledger.Record:
    """The newest record of the one item ``item`` names."""
    records = latest(root, [item])
    if len(records) != 1:
        raise OrchestratorError(f"{item!r} matches {len(records)} items; name one", hints=sorted(records))
    (rec,) = records.values()
    return rec


def log_path(root: Path, item: str) -> Path:
    rec = one(root, item)
    path = rec.log_path(root)
    if path is None:
        raise OrchestratorError(f"{item}: job {rec.job_id} has no log")
    return path
