"""Smoke verdicts: what each shape's last smoke job found, kept for ``submit`` to tell.

One file per shape, ``.orchestrator/smoke/verdicts/KEY.json``: the shape, the hash of the smoke
script it ran (a verdict holds for that script only), the item it was planned from, the job, the
time, passed or not and the failing rank's message. Judging the ranks' results is pure
(:func:`judge`); reading and writing the files is here too, and nothing else.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from orchestrator.scripts.smoke import SMOKE_DIR, Shape, SmokeJob
from orchestrator.slurm.states import JobInfo, State
from orchestrator.util import files

VERDICTS_DIR = f"{SMOKE_DIR}/verdicts"


@dataclass(frozen=True)
class SmokeVerdict:
    key: str
    shape: str  # its label
    item: str  # the item the smoke job was planned from
    digest: str  # the smoke script's sha256
    job_id: str
    passed: bool
    at: float  # when the job was judged (seconds since 1970)
    message: str  # what passed, or the failing rank and what it found
    log: str = ""  # the job's log, relative to the project


def judge(job: SmokeJob, job_id: str, info: JobInfo | None, ranks: Mapping[int, dict], log: str, at: float) -> SmokeVerdict:
    """The verdict on ``job`` from its ranks' results (rank -> rank-N.json) and what Slurm says of it."""
    world = job.expect.world_size

    def verdict(passed: bool, message: str) -> SmokeVerdict:
        return SmokeVerdict(job.shape.key, job.shape.label, job.item, job.digest, job_id, passed, at, message, log)

    failed = sorted((r, res) for r, res in ranks.items() if not res.get("ok"))
    if failed:
        rank, res = failed[0]
        bad = [c for c in res.get("checks", []) if not c.get("ok")]
        what = "; ".join(f"{c.get('check')}: {c.get('message')}" for c in bad) or "failed"
        more = f" (and {len(failed) - 1} other rank(s))" if len(failed) > 1 else ""
        return verdict(False, f"rank {rank} on {res.get('node', '?')}: {what}{more}")
    missing = [r for r in range(world) if r not in ranks]
    if missing:
        state = _ended(info)
        return verdict(False, f"rank(s) {_ranges(missing)} of {world} wrote no result: the job {state}; see its log")
    if info is not None and info.state != State.COMPLETED:
        return verdict(False, f"every rank passed, but the job {_ended(info)}")
    took = max((float(res.get("seconds", 0)) for res in ranks.values()), default=0.0)
    return verdict(True, f"{world} rank(s) passed in {took:.0f} s")


def _ended(info: JobInfo | None) -> str:
    if info is None:
        return "is not known to Slurm"
    code = f", exit code {info.exit_code}" if info.exit_code is not None else ""
    return f"ended {info.slurm_state}{code}"


def _ranges(numbers: Sequence[int]) -> str:
    shown = ", ".join(map(str, numbers[:8]))
    return shown + (f" (+{len(numbers) - 8} more)" if len(numbers) > 8 else "")


def save(root: Path, verdict: SmokeVerdict) -> None:
    files.write_if_changed(root / VERDICTS_DIR / f"{verdict.key}.json", json.dumps(asdict(verdict), indent=1) + "\n")


def load(root: Path, key: str) -> SmokeVerdict | None:
    """The shape's last verdict; None when there is none (or its file is not one: it is made again)."""
    path = root / VERDICTS_DIR / f"{key}.json"
    try:
        data = json.loads(path.read_text())
        return SmokeVerdict(**data)
    except (OSError, ValueError, TypeError):
        return None


def summary(root: Path, shapes: Sequence[tuple[Shape, str]], now: Callable[[], float] = time.time) -> str | None:
    """``submit``'s one line on the smoke tests of ``shapes`` (each with the digest of its smoke
    script as it is now): which passed and when, which not yet. None without shapes."""
    if not shapes:
        return None
    tested, untested = [], []
    for shape, digest in shapes:
        v = load(root, shape.key)
        if v is None:
            untested.append(shape.label)
        elif v.digest != digest:
            untested.append(f"{shape.label} (changed since its smoke test)")
        else:
            tested.append(f"{shape.label}: {'passed' if v.passed else 'FAILED'} {_ago(now() - v.at)}")
    line = f"smoke-tested {len(tested)} of {len(shapes)} shape(s)"
    if tested:
        line += f" ({'; '.join(tested)})"
    if untested:
        line += f"; not yet: {', '.join(untested)} (orchestrator smoke)"
    return line


def _ago(seconds: float) -> str:
    minutes = max(0, int(seconds // 60))
    if minutes < 60:
        return f"{minutes} min ago"
    if minutes < 48 * 60:
        return f"{minutes // 60} h ago"
    return f"{minutes // (24 * 60)} days ago"
