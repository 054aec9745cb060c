"""Attach or submit: at most one job per item and fingerprint, whatever was interrupted.

Under the item's ledger lock: follow the earlier job with the same fingerprint
(pending, running or succeeded), else adopt the job an interrupted submission
left behind, else write an intent, submit, and record the job. Both
``orchestrator run`` (:mod:`~orchestrator.jobs.foreground`) and ``orchestrator
submit`` (:mod:`~orchestrator.jobs.detached`) submit only through here.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import JobFailed
from orchestrator.jobs import backends, ledger, provenance
from orchestrator.scripts.plan import Plan
from orchestrator.scripts.workspace import Workspace
from orchestrator.slurm.states import JobInfo, State
from orchestrator.util.runner import Runner

# Set by the recording job of `orchestrator submit`: attach to finished jobs, never submit.
ATTACH_ONLY = "ORCH_ATTACH_ONLY"


@dataclass
class Outcome:
    record: ledger.Record
    attached: bool
    info: JobInfo | None = None


@dataclass(frozen=True)
class Submission:
    """One item's job as it would be submitted: the workspace and plan it comes from,
    its rendered script (text, and where it is written), and what identifies it (its
    fingerprint) or it makes (its outputs)."""

    ws: Workspace
    plan: Plan
    script: Path
    text: str
    fingerprint: str
    outs: tuple[str, ...] = ()
    after: tuple[str, ...] = ()  # job ids it waits for (sbatch only)


def attach_or_submit(records: ledger.ItemLedger, sub: Submission, backend: backends.Backend, runner: Runner, now: float) -> Outcome:
    """The one place a job is submitted; call it holding the item's ledger lock."""
    ws, plan, fp = sub.ws, sub.plan, sub.fingerprint
    outcome = attach(records, fp, backend) or adopt(records, sub, backend, runner)
    if outcome is not None:
        return outcome
    if os.environ.get(ATTACH_ONLY) == "1":
        raise JobFailed(
            f"{plan.item}: no finished or running job with this script and inputs to record (attach-only mode: nothing is submitted)"
        )
    missing = [name for name in plan.secrets if not os.environ.get(name)]
    problems = [f"secret {name} (orchestrator.secrets) is not set in this environment: export it before submitting" for name in missing]
    problems += backend.preflight(plan)
    if problems:
        raise backends.SchedulerError(f"{plan.item} was not submitted", problems)
    remove_stale(ws.root, sub.outs)  # what DVC does for outputs that do not persist
    # Slurm opens the log before the script runs: its folder must exist.
    (ws.root / plan.log).parent.mkdir(parents=True, exist_ok=True)
    # Nodes that failed this item's earlier tries (the retries now under way).
    exclude = sorted({n for r in records.trailing_faults(fp) for n in (*r.excluded, *r.fault_nodes)})
    records.begin(ledger.Intent(fp, plan.job_name, plan.workspace, now, tuple(r.job_id for r in records.records)))
    try:
        accepted = backend.submit(plan, sub.script, after=sub.after, exclude=exclude)
    except backends.Refused:
        records.forget_intent()  # refused: no job exists, nothing to look for later
        raise
    prov = provenance.at_submission(ws.root, runner, ws.profile, sub.text)
    record = _record(sub, backend, fp, accepted.job_id, accepted.log, now, prov, excluded=tuple(exclude))
    records.append(record)
    return Outcome(record, attached=False)


def _record(sub: Submission, backend: backends.Backend, fp: str, job_id: str, log: str, at: float, prov: dict, **more) -> ledger.Record:
    """A ledger record of one of ``sub``'s jobs, submitted (or found) at ``at``."""
    return ledger.Record(
        item=sub.plan.item,
        fingerprint=fp,
        backend=backend.name,
        job_id=job_id,
        profile=sub.ws.cluster,
        script=os.path.relpath(sub.script, sub.ws.root),
        submitted_at=at,
        log=log,
        provenance=prov,
        **more,
    )


def adopt(records: ledger.ItemLedger, sub: Submission, backend: backends.Backend, runner: Runner) -> Outcome | None:
    """Record the job an interrupted submission left behind (see :class:`ledger.Intent`);
    follow it if it is ``sub``'s (same fingerprint) and pending, running or done."""
    fp = sub.fingerprint
    intent = records.intent
    if intent is None:
        return None
    job_id = backend.find(intent)
    if job_id is None:
        records.forget_intent()  # the earlier process died before Slurm took the job
        return None
    info = backend.query([job_id]).get(job_id)
    prov = provenance.at_submission(sub.ws.root, runner, sub.ws.profile, sub.text) if intent.fingerprint == fp else {}
    log = sub.plan.log.replace("%j", job_id)  # as the sbatch backend names it (only Slurm jobs are adopted)
    state = info.state if info else State.PENDING
    record = _record(sub, backend, intent.fingerprint, job_id, log, intent.written_at, prov, state=state, adopted=True)
    records.append(record)
    if intent.fingerprint == fp and (record.state.active or record.state == State.COMPLETED):
        return Outcome(record, attached=True, info=info)
    return None


def remove_stale(root: Path, outs: tuple[str, ...]) -> None:
    for out in outs:
        path = root / out
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def attach(records: ledger.ItemLedger, fp: str, backend: backends.Backend) -> Outcome | None:
    """The earlier job with this fingerprint, if it is pending, running or succeeded."""
    earlier = records.latest(fp)
    if earlier is None or earlier.backend != backend.name or backend.name != "slurm":
        return None  # process jobs die with the process that ran them
    if not (earlier.state.active or earlier.state == State.COMPLETED):
        return None
    info = backend.query([earlier.job_id]).get(earlier.job_id)
    if info is None or not (info.state.active or info.state == State.COMPLETED):
        return None
    return Outcome(earlier, attached=True, info=info)
