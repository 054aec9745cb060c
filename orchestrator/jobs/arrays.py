"""Job arrays: many items of one shape in one ``sbatch --array``.

A sweep is hundreds of items that ask for the same resources and differ only in
their command, outputs and names. Submitting each alone costs one ``sbatch`` and
one job slot of the scheduler's bookkeeping per item, and sites cap both. Items
whose scripts ask Slurm for the same thing (every ``#SBATCH`` directive but the
job name and log, the same jobs to wait for, the same nodes to avoid) become the
tasks of one array; task ``i`` runs the ``i``-th item's own script, exactly as
``sbatch`` would have run it alone (its directives are then comments).

Each task runs a copy of its item's script named by the script's content, so a
later ``render`` or ``submit`` that rewrites the item's script cannot change what
a queued task runs. Arrays are cut to the cluster's MaxArraySize, and
``orchestrator.array_parallel`` in params.yaml caps how many tasks of one array
run at once (``%K``).

This module is pure (grouping, naming, the array's script); submitting it is
:func:`orchestrator.jobs.submission.submit_array`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator import __version__
from orchestrator.scripts import render
from orchestrator.scripts.plan import Plan, safe_form
from orchestrator.util import files

ARRAYS_DIR = ".orchestrator/arrays"
# Slurm's default MaxArraySize: task indices 0-1000.
DEFAULT_MAX_ARRAY_SIZE = 1001
# The directives that name one item's job; every other one is the array's.
_PER_ITEM = ("--job-name=", "--output=")


def shape(plan: Plan) -> tuple[str, ...]:
    """What an item asks Slurm for: its directives, less its name and log."""
    return tuple(a for a in plan.scheduler_args if not a.startswith(_PER_ITEM))


@dataclass(frozen=True)
class Member:
    """An item that is to become a task: its plan, its rendered script, its fingerprint."""

    plan: Plan
    text: str
    fingerprint: str


@dataclass(frozen=True)
class Array:
    """One ``sbatch --array`` of members of one shape, task ``i`` being ``members[i]``."""

    name: str  # the job name every task shares (how an interrupted submission finds it)
    members: tuple[Member, ...]
    directives: tuple[str, ...]  # the shared ones, without --array, --job-name, --output
    after: tuple[str, ...]  # job ids every member waits for
    parallel: int | None  # at most this many tasks running at once (``%K``)

    @property
    def workdir(self) -> str:
        return self.members[0].plan.workspace

    @property
    def log(self) -> str:
        """Slurm's log pattern for the tasks (``%A``: the array's id, ``%a``: the index)."""
        return f".orchestrator/logs/{self.name}-%A_%a.log"

    def log_from(self, workspace: str) -> str:
        """The tasks' log pattern relative to ``workspace`` (a member's, when the members
        come from several copies of a project: the logs are in the array's workdir)."""
        return os.path.relpath(os.path.join(self.workdir, self.log), workspace) if workspace != self.workdir else self.log

    def log_of(self, array_id: str, index: int, workspace: str | None = None) -> str:
        return task_log(self.log_from(workspace or self.workdir), array_id, index)

    @property
    def script(self) -> str:
        """Where the array's script is written, relative to the workspace."""
        return f"{ARRAYS_DIR}/{self.name}.sbatch"


def task_log(pattern: str, array_id: str, index: int) -> str:
    return pattern.replace("%A", array_id).replace("%a", str(index))


def group(
    candidates: Iterable[tuple[Member, tuple[str, ...]]], max_size: int, parallel: int | None = None
) -> tuple[list[Array], list[Member]]:
    """The arrays ``candidates`` (each a member and the job ids it waits for) make, each at
    most ``max_size`` tasks, in the order first seen; and the members alone in their shape
    (submitted as plain jobs: an array of one only renames the job)."""
    by_shape: dict[tuple, list[Member]] = {}
    afters: dict[tuple, tuple[str, ...]] = {}
    for member, after in candidates:
        # Not the workspace: an item's script changes to its own (the copies of a sweep share arrays).
        key = (shape(member.plan), tuple(sorted(after)))
        by_shape.setdefault(key, []).append(member)
        afters[key] = tuple(sorted(after))
    arrays, alone = [], []
    for key, members in by_shape.items():
        if len(members) == 1:
            alone += members
            continue
        for start in range(0, len(members), max(1, max_size)):
            chunk = tuple(members[start : start + max_size])
            if len(chunk) == 1:
                alone += chunk
                continue
            arrays.append(Array(_name(chunk), chunk, key[0], afters[key], parallel))
    return arrays, alone


def _name(members: Sequence[Member]) -> str:
    """A job name for the array, unique to its members and their fingerprints (so a
    killed submission's array is told apart from any other)."""
    stages = sorted({m.plan.item.split("@", 1)[0] for m in members})
    digest = hashlib.sha256("\n".join(f"{m.plan.workspace}\0{m.plan.item}\0{m.fingerprint}" for m in members).encode()).hexdigest()[:12]
    return f"{safe_form(stages[0] if len(stages) == 1 else 'mixed')[:60]}.array-{digest}"


def frozen_path(text: str) -> str:
    """Where a member's script is kept for its task, named by its content (relative to the workspace)."""
    return f"{ARRAYS_DIR}/scripts/{hashlib.sha256(text.encode()).hexdigest()[:24]}.sbatch"


def render_array(array: Array, profile: str) -> str:
    """The array's script: its directives, then a switch on the task index to the member's script."""
    spec = f"0-{len(array.members) - 1}" + (f"%{array.parallel}" if array.parallel else "")
    directives = (f"--job-name={array.name}", *array.directives, f"--array={spec}", f"--output={array.log}")
    return (
        render.environment()
        .get_template("array.sh.j2")
        .render(
            version=__version__,
            profile=profile,
            directives=directives,
            # Absolute: a task may run an item of another copy of the project (its script changes there).
            scripts=[os.path.join(m.plan.workspace, frozen_path(m.text)) for m in array.members],
            items=[m.plan.item for m in array.members],
        )
    )


def write(array: Array, profile: str, written_at: float) -> Path:
    """Write the members' frozen scripts (each in its own workspace), the array's script
    and, in every workspace with members, a manifest naming the array and their indices
    (what a damaged ledger file's recovery searches by); the script's path."""
    indices: dict[str, dict[str, int]] = {}
    for index, member in enumerate(array.members):
        path = Path(member.plan.workspace) / frozen_path(member.text)
        if not path.exists():
            files.write_if_changed(path, member.text, mode=0o755)
        indices.setdefault(member.plan.workspace, {})[member.plan.item] = index
    script = Path(array.workdir) / array.script
    files.write_if_changed(script, render_array(array, profile), mode=0o755)
    for workspace, items in indices.items():
        log = array.log_from(workspace)
        manifest = {"name": array.name, "workdir": array.workdir, "written_at": written_at, "items": items, "log": log}
        files.atomic_write(Path(workspace) / ARRAYS_DIR / f"{array.name}.json", json.dumps(manifest, indent=1), durable=True)
    return script


@dataclass(frozen=True)
class Placement:
    """Where an item was put in an array, as its manifest says."""

    name: str
    workdir: str
    written_at: float
    index: int
    log: str


def placements(root: Path, item: str) -> list[Placement]:
    """Every array ``item`` was put in, oldest first (for recovering a damaged ledger file)."""
    found = []
    folder = root / ARRAYS_DIR
    for path in folder.glob("*.json") if folder.is_dir() else ():
        try:
            data = json.loads(path.read_text())
            if item in data["items"]:
                found.append(Placement(data["name"], data["workdir"], float(data["written_at"]), int(data["items"][item]), data["log"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue  # not this item's, or not a manifest
    return sorted(found, key=lambda p: p.written_at)


def max_array_size(config_value: str | None) -> int:
    """The most tasks one array may have: MaxArraySize from ``scontrol show config``
    (indices run up to MaxArraySize - 1), Slurm's default when unknown."""
    if config_value and config_value.strip().isdigit() and int(config_value) > 0:
        return int(config_value)
    return DEFAULT_MAX_ARRAY_SIZE
