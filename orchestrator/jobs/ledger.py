"""The ledger: every submission, kept in the workspace.

One JSON file per item (``.orchestrator/ledger/<item>.json``) holds the item's
submissions, newest last. Files are replaced atomically (write beside, then
rename), so a reader never sees half a file and a killed writer leaves the old
one. Read-check-submit-append runs under an exclusive ``flock`` on the item's
lock file, so two processes (two ``orchestrator submit`` started together, a
``dvc repro`` next to a ``submit``) never both submit the same item.

A file that cannot be read (truncated, emptied, binary, a folder, the wrong
shape) is moved aside, never deleted, and replaced by an empty ledger that says
so (:class:`Recovery`): before anything is submitted for that item again,
Slurm is asked for the item's job (:func:`orchestrator.jobs.submission.recover`),
so a damaged file never causes a second job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import UnreadableFile
from orchestrator.scripts.plan import safe_form, safe_name
from orchestrator.slurm.states import State
from orchestrator.util import files

LEDGER_DIR = ".orchestrator/ledger"
# An item's file holds a few kilobytes per submission; more than this is not one of ours,
# and reading it whole could exhaust memory.
MAX_ENTRY_BYTES = 64 << 20


@dataclass(frozen=True)
class Record:
    """One submission of one item."""

    item: str
    fingerprint: str  # of the rendered script and the item's inputs
    backend: str  # "slurm" or "local"
    job_id: str
    profile: str
    script: str  # relative to the workspace
    submitted_at: float
    state: State = State.PENDING
    exit_code: int | None = None
    log: str | None = None  # relative to the workspace, job id filled in
    nodelist: str | None = None
    nodes: int | None = None
    elapsed_s: int | None = None
    requeues: int = 0
    provenance: dict = field(default_factory=dict)
    excluded: tuple[str, ...] = ()  # nodes the job was told to avoid (--exclude)
    fault: str | None = None  # why it failed, when that was the hardware's fault (retried)
    fault_nodes: tuple[str, ...] = ()  # the nodes that fault names
    adopted: bool = False  # found on the scheduler after a killed submission, not seen submitted
    workspace: str | None = None  # where the job runs, when another copy of the project than the reader's may follow it
    metrics: tuple[str, ...] = ()  # the item's metrics files (relative to the workspace), once it succeeded

    def log_path(self, root: Path) -> Path | None:
        """The job's log. The blocking srun form learns no job id, so its log
        name keeps Slurm's %j: the newest file matching it is this job's."""
        if not self.log:
            return None
        if "%j" not in self.log:
            return root / self.log
        matches = sorted((root / self.log).parent.glob(Path(self.log).name.replace("%j", "*")), key=lambda p: p.stat().st_mtime)
        return matches[-1] if matches else root / self.log

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["state"] = self.state.value
        return data

    @classmethod
    def from_json(cls, data: dict) -> Record:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for name in ("item", "fingerprint", "backend", "job_id", "profile", "script"):
            if not isinstance(values.get(name), str):
                raise ValueError(f"{name} must be a string, not {values.get(name)!r:.40}")
        if not isinstance(values.get("submitted_at"), int | float):
            raise ValueError("submitted_at must be a number")
        values["state"] = State(values.get("state", "unknown")) if values.get("state") in State._value2member_map_ else State.UNKNOWN
        for name in ("excluded", "fault_nodes", "metrics"):
            values[name] = tuple(values.get(name, ()))
        return cls(**values)


@dataclass(frozen=True)
class Intent:
    """A submission about to happen, written before ``sbatch`` runs.

    ``sbatch`` and the ledger's append are two steps: a process killed between them
    leaves a job no record names. The intent says where to look for it (job name,
    working dir, time), so the next run adopts that job instead of submitting twice.
    """

    fingerprint: str
    job_name: str
    workdir: str
    written_at: float
    known: tuple[str, ...] = ()  # job ids already recorded: not the one we look for
    # A task of an array (orchestrator.jobs.arrays): the job found is the array, the
    # item's is its task ``<array>_<index>``, logging to ``log`` (``%A``/``%a`` unfilled).
    array_index: int | None = None
    log: str | None = None


@dataclass(frozen=True)
class Recovery:
    """What replaced a damaged ledger file: where the file went and what was wrong."""

    item: str  # the item's name, or the file's where no item was named
    damaged: str  # where the damaged file was moved (relative to the ledger folder)
    problem: str
    mtime: float  # of the damaged file: the item's jobs were submitted before it
    checked: bool = False  # Slurm has been asked for the item's job since
    found: str | None = None  # the job Slurm named, if any


class LedgerDamaged(Exception):
    """A ledger file that cannot be read; the message says what is wrong with it."""


class ItemLedger:
    """The records of one item, read and written while its lock is held."""

    def __init__(self, path: Path, records: list[Record], intent: Intent | None = None, recovery: Recovery | None = None) -> None:
        self.path = path
        self.records = records
        self.intent = intent
        self.recovery = recovery

    def recovered(self, found: str | None) -> None:
        """Slurm has been asked for the item's job after a recovery; ``found`` is its answer."""
        if self.recovery is not None:
            self.recovery = dataclasses.replace(self.recovery, checked=True, found=found)
            self._save()

    def trailing_faults(self, fingerprint: str) -> list[Record]:
        """The records of ``fingerprint`` since its last job that did not fail on a
        node fault: the chain of retries now under way, oldest first."""
        chain: list[Record] = []
        for r in self.records:
            if r.fingerprint != fingerprint:
                continue
            # A job Slurm requeued after a node failure and that then completed ends a chain.
            chain = [*chain, r] if r.fault and r.state != State.COMPLETED else []
        return chain

    def begin(self, intent: Intent) -> None:
        """Record that a submission is about to happen (see :class:`Intent`)."""
        self.intent = intent
        self._save()

    def forget_intent(self) -> None:
        if self.intent is not None:
            self.intent = None
            self._save()

    def latest(self, fingerprint: str) -> Record | None:
        matching = [r for r in self.records if r.fingerprint == fingerprint]
        return matching[-1] if matching else None

    def append(self, record: Record) -> None:
        """Add a record; it also settles a pending intent (one atomic write)."""
        self.records.append(record)
        self.intent = None
        self._save()

    def update(self, job_id: str, **changes) -> Record:
        for i, r in enumerate(self.records):
            if r.job_id == job_id:
                self.records[i] = dataclasses.replace(r, **changes)
                self._save()
                return self.records[i]
        raise KeyError(job_id)

    def _save(self) -> None:
        _write(self.path, self.records, self.intent, self.recovery)


def _say(line: str) -> None:
    print(f"orchestrator: {line}", file=sys.stderr, flush=True)


class Ledger:
    def __init__(self, root: Path, say: Callable[[str], None] = _say, folder: Path | None = None) -> None:
        self.dir = folder or root / LEDGER_DIR  # a DVC experiment copy's is in its project (jobs.experiment)
        self.say = say  # where a recovered file is reported

    def _path(self, item: str) -> Path:
        return self.dir / f"{safe_name(item)}.json"

    @contextlib.contextmanager
    def locked(self, item: str) -> Iterator[ItemLedger]:
        """Hold the item's lock; yields its records for reading and appending."""
        path = self._path(item)
        with files.locked(path.with_suffix(".lock")):
            self._adopt_legacy(path, item)
            yield self._open(path, item)

    def _legacy(self, item: str) -> Path:
        return self.dir / f"{safe_form(item)}.json"

    def _adopt_legacy(self, path: Path, item: str) -> None:
        """Earlier versions named every item's file by its safe form alone (so ``a b`` and
        ``a_b`` shared one); such a file holding this item's records becomes its own."""
        legacy = self._legacy(item)
        if legacy == path or path.exists() or not legacy.is_file():
            return
        with files.locked(legacy.with_suffix(".lock")):
            try:
                records = _read_all(legacy)[0]
            except LedgerDamaged:
                return  # the item it belongs to recovers it
            if records and records[-1].item == item:
                os.rename(legacy, path)

    def _open(self, path: Path, item: str | None) -> ItemLedger:
        """The item's ledger, a damaged file recovered (call it holding the lock)."""
        try:
            return _read_for(path, item)
        except LedgerDamaged as exc:
            return self._recover(path, item, str(exc))

    def _recover(self, path: Path, item: str | None, problem: str) -> ItemLedger:
        stat = path.lstat()
        aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
        os.rename(path, aside)  # kept for whoever wants to look at it; a folder moves the same way
        recovery = Recovery(item or path.stem, aside.name, problem, stat.st_mtime)
        ledger = ItemLedger(path, [], None, recovery)
        ledger._save()
        self.say(
            f"ledger file {path} is damaged ({problem}); moved it to {aside.name} beside it. "
            "Slurm is asked for this item's job before anything is submitted for it"
        )
        return ledger

    def records(self, item: str) -> list[Record]:
        return self.history(item).records

    def history(self, item: str) -> ItemLedger:
        """The item's ledger for reading (a damaged file is recovered first)."""
        path = self._path(item)
        try:
            if path.exists() or not self._legacy(item).exists():
                return _read_for(path, item)
        except LedgerDamaged:
            pass
        with self.locked(item) as ledger:
            return ledger

    def items(self) -> dict[str, ItemLedger]:
        """Every item's ledger, by item name (for status); damaged files are recovered."""
        found: dict[str, ItemLedger] = {}
        if self.dir.is_dir():
            for path in sorted(self.dir.glob("*.json")):
                try:
                    ledger = ItemLedger(path, *_read_all(path))
                except LedgerDamaged:
                    with files.locked(path.with_suffix(".lock")):
                        ledger = self._open(path, None)
                if ledger.records:
                    found[ledger.records[-1].item] = ledger
                elif ledger.recovery is not None:
                    found[ledger.recovery.item] = ledger
        return found


def _read_for(path: Path, item: str | None) -> ItemLedger:
    """``item``'s ledger in ``path``. A file holding another item's records (earlier
    versions gave ``a b`` and ``a_b`` one file) counts as damaged: its records are not
    this item's, and the recovery asks Slurm for this item's job."""
    ledger = ItemLedger(path, *_read_all(path))
    if item is not None and ledger.records and ledger.records[-1].item != item:
        raise LedgerDamaged(f"it holds the records of item {ledger.records[-1].item!r}, not {item!r} (a file of an earlier version)")
    return ledger


def _read_all(path: Path) -> tuple[list[Record], Intent | None, Recovery | None]:
    """The file's records, intent and recovery note; LedgerDamaged if it cannot be read."""
    try:
        text = files.read_regular(path, MAX_ENTRY_BYTES)
    except UnreadableFile as exc:
        if exc.missing:
            return [], None, None
        raise LedgerDamaged(f"it {exc.reason}") from None
    if not text.strip():
        raise LedgerDamaged("it is empty")
    try:
        data = json.loads(text)
    except UnicodeDecodeError:
        raise LedgerDamaged("it is not text (binary data)") from None
    except ValueError as exc:
        raise LedgerDamaged(f"it is not valid JSON ({exc}); was it cut short?") from None
    if not isinstance(data, dict) or not isinstance(data.get("records", []), list):
        raise LedgerDamaged('it is JSON of the wrong shape (expected {"records": [...]})')
    try:
        records = [Record.from_json(d) for d in data.get("records", [])]
        intent = data.get("submitting")
        if intent is not None:
            intent = Intent(**{**intent, "known": tuple(intent.get("known", ()))})
        recovery = data.get("recovered")
        recovery = Recovery(**recovery) if recovery is not None else None
    except (TypeError, ValueError, AttributeError) as exc:
        raise LedgerDamaged(f"an entry has the wrong shape ({exc})") from None
    return records, intent, recovery


def _write(path: Path, records: list[Record], intent: Intent | None, recovery: Recovery | None = None) -> None:
    data: dict = {"records": [r.to_json() for r in records]}
    if intent is not None:
        data["submitting"] = dataclasses.asdict(intent)
    if recovery is not None:
        data["recovered"] = dataclasses.asdict(recovery)
    files.atomic_write(path, json.dumps(data, indent=1, sort_keys=True), durable=True)  # the job id must survive a crash
