"""How many more jobs this user may queue: the MaxSubmitJobs limits of Slurm's accounting.

Sites cap the jobs a user may have queued or running, on the association (user and
account) and on the QOS. Past the cap sbatch refuses, so a sweep submitted item by item
would stop half-way, some items queued and the rest not. ``orchestrator submit``
therefore asks first and, when the items would not fit, submits them in waves (see
:mod:`orchestrator.jobs.detached`), or refuses the whole submission, naming the limit,
when not even one item and its recording job fit. (An array task counts as a job for
these limits too.)
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from orchestrator.util.runner import Runner


@dataclass(frozen=True)
class Limit:
    limit: int
    queued: int  # the jobs already counted against it
    what: str  # e.g. "the association of root with account project_1 (MaxSubmitJobs)"

    @property
    def room(self) -> int:
        return max(0, self.limit - self.queued)


def submit_limits(runner: Runner, user: str, account: str | None, qos: str | None) -> list[Limit]:
    """The submit limits that apply to ``user``'s jobs under ``account`` and ``qos``
    (the association's default QOS when None); empty when there are none or accounting
    cannot be asked (sbatch then has the last word, as before)."""
    found = []
    where = ["user=" + user] + (["account=" + account] if account else [])
    assoc = _rows(runner, ["sacctmgr", "-n", "-P", "show", "assoc", "where", *where, "format=MaxSubmit,GrpSubmit,DefaultQOS"])
    limit = _smallest(row[i] for row in assoc for i in (0, 1) if len(row) > 1)
    if limit is not None:
        owner = f"{user} with account {account}" if account else user
        found.append(Limit(limit, _queued(runner, ["-u", user, *(["-A", account] if account else [])]), f"the association of {owner}"))
    qos = qos or next((row[2] for row in assoc if len(row) > 2 and row[2]), None)
    if qos:
        rows = _rows(runner, ["sacctmgr", "-n", "-P", "show", "qos", "where", "name=" + qos, "format=MaxSubmitPU,GrpSubmit"])
        per_user = _smallest(row[0] for row in rows if row)
        if per_user is not None:
            found.append(Limit(per_user, _queued(runner, ["-u", user, "-q", qos]), f"QOS {qos}, per user"))
        whole = _smallest(row[1] for row in rows if len(row) > 1)
        if whole is not None:
            found.append(Limit(whole, _queued(runner, ["-q", qos]), f"QOS {qos}, all users together"))
    return found


def _rows(runner: Runner, argv: list[str]) -> list[list[str]]:
    try:
        done = runner.run(argv, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    return [line.split("|") for line in done.stdout.splitlines() if line.strip()]


def _smallest(values) -> int | None:
    numbers = [int(v) for v in values if v and v.strip().isdigit()]
    return min(numbers) if numbers else None


def _queued(runner: Runner, selection: list[str]) -> int:
    """Jobs pending or running (array tasks each), as the limit counts them."""
    try:
        done = runner.run(["squeue", "-h", "-r", "-o", "%i", *selection], timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return len(done.stdout.split()) if done.returncode == 0 else 0
