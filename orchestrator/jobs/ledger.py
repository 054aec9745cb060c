"""The ledger: every submission, kept in the workspace.

One JSON file per item (``.orchestrator/ledger/<item>.json``) holds the item's
submissions, newest last. Files are replaced atomically (write beside, then
rename), so a reader never sees half a file and a killed writer leaves the old
one. Read-check-submit-append runs under an exclusive ``flock`` on the item's
lock file, so two processes (two ``orchestrator submit`` started together, a
``dvc repro`` next to a ``submit``) never both submit the same item.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.scripts.plan import safe_name
from orchestrator.slurm.states import State
from orchestrator.util import files

LEDGER_DIR = ".orchestrator/ledger"


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


class ItemLedger:
    """The records of one item, read and written while its lock is held."""

    def __init__(self, path: Path, records: list[Record], intent: Intent | None = None) -> None:
        self.path = path
        self.records = records
        self.intent = intent

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
        _write(self.path, self.records, self.intent)


class Ledger:
    def __init__(self, root: Path) -> None:
        self.dir = root / LEDGER_DIR

    def _path(self, item: str) -> Path:
        return self.dir / f"{safe_name(item)}.json"

    @contextlib.contextmanager
    def locked(self, item: str) -> Iterator[ItemLedger]:
        """Hold the item's lock; yields its records for reading and appending."""
        path = self._path(item)
        with files.locked(path.with_suffix(".lock")):
            yield ItemLedger(path, *_read_all(path))

    def records(self, item: str) -> list[Record]:
        return _read(self._path(item))

    def items(self) -> dict[str, list[Record]]:
        """Every item's records, by item name (for status)."""
        found: dict[str, list[Record]] = {}
        if self.dir.is_dir():
            for path in sorted(self.dir.glob("*.json")):
                records = _read(path)
                if records:
                    found[records[-1].item] = records
        return found


def _read(path: Path) -> list[Record]:
    return _read_all(path)[0]


def _read_all(path: Path) -> tuple[list[Record], Intent | None]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return [], None
    intent = data.get("submitting")
    if intent is not None:
        intent = Intent(**{**intent, "known": tuple(intent.get("known", ()))})
    return [Record.from_json(d) for d in data.get("records", [])], intent


def _write(path: Path, records: list[Record], intent: Intent | None) -> None:
    data: dict = {"records": [r.to_json() for r in records]}
    if intent is not None:
        data["submitting"] = dataclasses.asdict(intent)
    files.atomic_write(path, json.dumps(data, indent=1, sort_keys=True), durable=True)  # the job id must survive a crash
