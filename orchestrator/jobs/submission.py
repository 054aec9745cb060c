"""Attach or submit: at most one job per item and fingerprint, whatever was interrupted.

Under the item's ledger lock: follow the earlier job with the same fingerprint
(pending, running or succeeded), else adopt the job an interrupted submission
left behind, else write an intent, submit, and record the job. Both
``orchestrator run`` (:mod:`~orchestrator.jobs.foreground`) and ``orchestrator
submit`` (:mod:`~orchestrator.jobs.detached`) submit only through here.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import JobFailed, OrchestratorError
from orchestrator.jobs import arrays, backends, ledger, provenance
from orchestrator.scripts.plan import Plan
from orchestrator.scripts.workspace import Workspace
from orchestrator.slurm.states import JobInfo, State
from orchestrator.util.poll import Backoff, Clock, Poller
from orchestrator.util.runner import Runner

# Set by the recording job of `orchestrator submit`: attach to finished jobs, never submit.
ATTACH_ONLY = "ORCH_ATTACH_ONLY"
# Before a job the ledger holds as queued or running is taken for gone because Slurm does
# not list it, Slurm is asked again after these pauses (s): its database lags its controller.
LOOKUP_RETRY = Backoff(first_s=1.0, factor=2.0, max_s=8.0)
LOOKUP_RETRY_S = LOOKUP_RETRY.waits(4)
pause = time.sleep  # tests replace it


@dataclass
class SubmitOutcome:
    record: ledger.Record
    attached: bool
    info: JobInfo | None = None
    why_new: str | None = None  # why an earlier job of the same fingerprint was not followed


class NotRecorded(OrchestratorError):
    """Slurm took the job, but the ledger could not be written (a full disk, say)."""


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
    force: bool = False  # a new job even if one of the same fingerprint succeeded (see pipeline.invocation)

    def missing(self) -> list[str]:
        """The outputs that are not there now."""
        return [o for o in self.outs if not os.path.lexists(self.ws.root / o)]


def attach_or_submit(records: ledger.ItemLedger, sub: Submission, backend: backends.Backend, runner: Runner, now: float) -> SubmitOutcome:
    """The one place a job is submitted for one item; call it holding the item's ledger lock."""
    outcome = existing(records, sub, backend, runner)
    if outcome is not None and outcome.why_new is None:
        return outcome
    return submit_one(records, sub, backend, runner, now, outcome.why_new if outcome is not None else None)


def submit_one(
    records: ledger.ItemLedger, sub: Submission, backend: backends.Backend, runner: Runner, now: float, why_new: str | None = None
) -> SubmitOutcome:
    """Submit ``sub``'s job, which :func:`existing` found none to follow for; hold the item's lock."""
    refuse_if_attach_only(sub, why_new, records)
    prepare(sub, backend)
    # Nodes that failed this item's earlier tries (the retries now under way).
    exclude = excluded(records, sub.fingerprint)
    records.begin(ledger.Intent(sub.fingerprint, sub.plan.job_name, sub.plan.workspace, now, tuple(r.job_id for r in records.records)))
    try:
        accepted = backend.submit(sub.plan, sub.script, after=sub.after, exclude=exclude)
    except backends.Refused:
        records.forget_intent()  # refused: no job exists, nothing to look for later
        raise
    prov = _at_submission(sub, runner)
    record = _record(sub, backend, sub.fingerprint, accepted.job_id, accepted.log, now, prov, excluded=tuple(exclude))
    _append(records, record)
    return SubmitOutcome(record, attached=False, why_new=why_new)


def _at_submission(sub: Submission, runner: Runner) -> dict:
    plan = sub.plan
    return provenance.at_submission(sub.ws.root, runner, sub.ws.profile, sub.text, _image_file(sub), plan.partition, plan.account)


def existing(records: ledger.ItemLedger, sub: Submission, backend: backends.Backend, runner: Runner) -> SubmitOutcome | None:
    """The job already made for ``sub`` (after a damaged ledger, a killed submission, or
    an earlier run), if it is to be followed; a SubmitOutcome with ``why_new`` when it is not;
    None when there is none. Call it holding the item's ledger lock."""
    attach_only = os.environ.get(ATTACH_ONLY) == "1"
    if attach_only:
        sub = dataclasses.replace(sub, force=False)  # the recording job records what was forced, it never forces again
    return recover(records, sub, backend, runner, attach_only) or adopt(records, sub, backend, runner) or attach(records, sub, backend)


def refuse_if_attach_only(sub: Submission, why_new: str | None, records: ledger.ItemLedger | None = None) -> None:
    """In the recording job of ``submit`` nothing is submitted: say why the item has no job to
    record (its job with this script and inputs that failed or was cancelled, where ``records`` has one)."""
    if os.environ.get(ATTACH_ONLY) == "1":
        ended = records.latest(sub.fingerprint) if records is not None and why_new is None else None
        if ended is not None and not ended.state.active and ended.state != State.COMPLETED:
            why_new = f"its job {ended.job_id} {ended.state.value}, nothing to record (log {ended.log})"
        raise JobFailed(
            f"{sub.plan.item}: {why_new or 'no finished or running job with this script and inputs to record'} "
            "(attach-only mode: nothing is submitted)",
            hints=[f"run `dvc repro {sub.plan.item}` or `orchestrator submit` to make it again"] if why_new else [],
        )


def prepare(sub: Submission, backend: backends.Backend) -> None:
    """Before ``sub``'s job is submitted: its secrets are set, the cluster would take it,
    its old outputs are gone (as DVC removes outputs that do not persist), its log's folder exists."""
    missing = [name for name in sub.plan.secrets if not os.environ.get(name)]
    problems = [f"secret {name} (orchestrator.secrets) is not set in this environment: export it before submitting" for name in missing]
    problems += backend.preflight(sub.plan)
    if problems:
        raise backends.SchedulerError(f"{sub.plan.item} was not submitted", problems)
    remove_stale(sub.ws.root, sub.outs)
    # Slurm opens the log before the script runs: its folder must exist.
    (sub.ws.root / sub.plan.log).parent.mkdir(parents=True, exist_ok=True)


def excluded(records: ledger.ItemLedger, fingerprint: str) -> list[str]:
    """Nodes that failed this fingerprint's earlier tries (the retries now under way)."""
    return sorted({n for r in records.trailing_faults(fingerprint) for n in (*r.excluded, *r.fault_nodes)})


@dataclass
class Task:
    """An item to become a task of an array: its ledger (locked by the caller), its
    submission, and why an earlier job of it is not followed."""

    records: ledger.ItemLedger
    sub: Submission
    why_new: str | None = None


def submit_array(
    tasks: list[Task], array: arrays.Array, backend: backends.SbatchBackend, runner: Runner, now: float
) -> list[SubmitOutcome]:
    """Submit ``array``, whose members are ``tasks`` in order; hold every task's ledger lock.

    Every task's intent names the array and the task's index before sbatch runs, so a
    process killed between sbatch and the ledger leaves tasks the next run adopts."""
    ws = tasks[0].sub.ws  # the array's workdir: its script and logs are there
    for task in tasks:
        refuse_if_attach_only(task.sub, task.why_new, task.records)
        prepare(task.sub, backend)
    script = arrays.write(array, ws.cluster, now)
    (Path(array.workdir) / array.log).parent.mkdir(parents=True, exist_ok=True)
    for index, task in enumerate(tasks):
        known = tuple(r.job_id for r in task.records.records)
        log = array.log_from(task.sub.plan.workspace)
        task.records.begin(ledger.Intent(task.sub.fingerprint, array.name, array.workdir, now, known, array_index=index, log=log))
    try:
        array_id = backend.sbatch(script, array.workdir, f"array {array.name} ({len(tasks)} items)", array.after)
    except backends.Refused:
        for task in tasks:
            task.records.forget_intent()
        raise
    bases: dict[Path, dict] = {}  # the code's state, one per workspace
    outcomes = []
    for index, task in enumerate(tasks):
        member_ws = task.sub.ws
        if member_ws.root not in bases:
            bases[member_ws.root] = provenance.at_submission(member_ws.root, runner, member_ws.profile, "")
        prov = {**bases[member_ws.root], **provenance.of_job(task.sub.text, task.sub.plan.partition), "array": array_id}
        image = _image_file(task.sub) or prov.get("image")
        if image:  # each task's own: the base was taken without a script (no account to fill in)
            prov["image"] = image
            prov.pop("image_sha256", None)
            if sha := provenance.image_sha256(member_ws.root, image, task.sub.plan.account):
                prov["image_sha256"] = sha
        log = array.log_of(array_id, index, task.sub.plan.workspace)
        record = _record(task.sub, backend, task.sub.fingerprint, f"{array_id}_{index}", log, now, prov)
        record = dataclasses.replace(record, script=arrays.frozen_path(task.sub.text))
        _append(task.records, record)
        outcomes.append(SubmitOutcome(record, attached=False, why_new=task.why_new))
    return outcomes


def _append(records: ledger.ItemLedger, record: ledger.Record) -> None:
    try:
        records.append(record)
    except OSError as exc:
        # The intent written before sbatch is still on disk: the next run finds this job by it.
        raise NotRecorded(
            f"{record.item}: Slurm accepted job {record.job_id}, but its ledger entry could not be written: {exc.strerror or exc}",
            hints=[f"free space or fix {records.path.parent}, then run again: it finds job {record.job_id} and follows it"],
        ) from exc


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
        workspace=sub.plan.workspace,
        **more,
    )


def recover(
    records: ledger.ItemLedger, sub: Submission, backend: backends.Backend, runner: Runner, attach_only: bool
) -> SubmitOutcome | None:
    """After a damaged ledger file was replaced, ask Slurm for the item's newest job
    (by job name and working dir, as :func:`adopt` does) before anything is submitted.

    A queued or running job is followed: it was submitted for this item, and a second
    one would run beside it. A finished one is only recorded in the history, since its
    script and inputs are unknown, except for the recording job of ``submit``
    (attach-only), which runs right after the jobs it records.
    """
    recovery = records.recovery
    if recovery is None or recovery.checked or backend.name != "slurm":
        return None
    # Its own job, or a task of the newest array it was put in (their manifests stay).
    looks = [ledger.Intent("", sub.plan.job_name, sub.plan.workspace, recovery.mtime)]
    looks += [
        ledger.Intent("", p.name, p.workdir, min(p.written_at, recovery.mtime), array_index=p.index, log=p.log)
        for p in reversed(arrays.placements(sub.ws.root, sub.plan.item))
    ]
    found = [(look, job) for look in looks if (job := backend.find(look)) is not None]
    job_id: str | None = None
    log = ""  # set with job_id
    if found:
        look, job = max(found, key=lambda f: int(f[1]))
        job_id, log = _job_of(look, job, sub.plan)
    info = backend.query([job_id]).get(job_id) if job_id else None
    outcome = None
    if job_id is not None:
        state = info.state if info else State.PENDING
        follow = state.active or (attach_only and state == State.COMPLETED and not sub.missing())
        prov = _at_submission(sub, runner) if follow else {}
        fp = sub.fingerprint if follow else ""  # a finished job's script and inputs are unknown: never attached to later
        record = _record(sub, backend, fp, job_id, log, recovery.mtime, prov, state=state, adopted=True)
        records.append(record)
        outcome = SubmitOutcome(record, attached=True, info=info) if follow else None
    records.recovered(job_id)
    return outcome


def adopt(records: ledger.ItemLedger, sub: Submission, backend: backends.Backend, runner: Runner) -> SubmitOutcome | None:
    """Record the job an interrupted submission left behind (see :class:`ledger.Intent`);
    follow it if it is ``sub``'s (same fingerprint) and pending, running or done."""
    fp = sub.fingerprint
    intent = records.intent
    if intent is None:
        return None
    found = backend.find(intent)
    if found is None:
        records.forget_intent()  # the earlier process died before Slurm took the job
        return None
    job_id, log = _job_of(intent, found, sub.plan)
    info = backend.query([job_id]).get(job_id)
    prov = _at_submission(sub, runner) if intent.fingerprint == fp else {}
    state = info.state if info else State.PENDING
    record = _record(sub, backend, intent.fingerprint, job_id, log, intent.written_at, prov, state=state, adopted=True)
    records.append(record)
    if intent.fingerprint != fp:
        return None
    return _follow(record, info, sub)


def _job_of(intent: ledger.Intent, found: str, plan: Plan) -> tuple[str, str]:
    """The item's job id and log, given the job ``find`` found for ``intent``: the job
    itself, or the item's task of the array found (only Slurm jobs are adopted)."""
    if intent.array_index is None:
        return found, plan.log.replace("%j", found)
    return f"{found}_{intent.array_index}", arrays.task_log(intent.log or "", found, intent.array_index)


def bring_outputs(sub: Submission, record: ledger.Record) -> list[str]:
    """Copy into ``sub``'s workspace the outputs that ``record``'s job made in another copy
    of the project (an earlier run of the same DVC experiment: see :mod:`.experiment`);
    the ones brought. Hard links where the file system allows (no second copy of a
    checkpoint), else copies; an output the other copy lacks is left missing."""
    if not record.workspace or os.path.realpath(record.workspace) == os.path.realpath(sub.ws.root):
        return []
    brought = []
    for out in sub.missing():
        source = Path(record.workspace) / out
        if not os.path.lexists(source):
            continue
        target = sub.ws.root / out
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(str(source), str(target))
        brought.append(out)
    return brought


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def remove_stale(root: Path, outs: tuple[str, ...]) -> None:
    for out in outs:
        path = root / out
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def attach(records: ledger.ItemLedger, sub: Submission, backend: backends.Backend) -> SubmitOutcome | None:
    """The earlier job with this fingerprint, if it is pending or running, or if it
    succeeded and its outputs are all still there (and the run is not forced)."""
    earlier = records.latest(sub.fingerprint)
    if earlier is None or earlier.backend != backend.name:
        return None
    if backend.name != "slurm":
        # A process job ends with the process that ran it: only one that succeeded (here,
        # as one of a stage's items run together) is anything to follow.
        if earlier.state != State.COMPLETED:
            return None
        ended = JobInfo(
            earlier.job_id,
            State.COMPLETED,
            "process",
            earlier.exit_code,
            elapsed_s=earlier.elapsed_s,
            nodes=earlier.nodes,
            nodelist=earlier.nodelist,
        )
        return _follow(earlier, ended, sub)
    if not (earlier.state.active or earlier.state == State.COMPLETED):
        return None
    # Taken for gone, a job that has just ended would be submitted a second time (seen: an array task at its end).
    info = lookup(backend, [earlier.job_id], live=None if earlier.state.active else ()).get(earlier.job_id)
    if info is None:
        return None
    return _follow(earlier, info, sub)


def lookup(backend: backends.Backend, job_ids: Sequence[str], live: Sequence[str] | None = None) -> dict[str, JobInfo]:
    """``backend.query(job_ids)`` (one query), asking again (after LOOKUP_RETRY_S) for the jobs of
    ``live`` (default: all) found nowhere: a job that has just ended is in neither the controller's
    list (it keeps running and pending jobs) nor, for a few seconds, the database's."""
    infos = dict(backend.query(list(job_ids)))
    lost = [job for job in (job_ids if live is None else live) if job not in infos]
    poller = Poller(LOOKUP_RETRY, clock=Clock(sleep=pause), tries=len(LOOKUP_RETRY_S))
    while lost and poller.sleep():
        infos.update(backend.query(lost))
        lost = [job for job in lost if job not in infos]
    return infos


def _follow(record: ledger.Record, info: JobInfo | None, sub: Submission) -> SubmitOutcome | None:
    """``record``'s job as this item's, unless it is no longer one: it failed, or it
    succeeded but its outputs are gone or a new job was asked for."""
    state = info.state if info else record.state
    if state.active:
        return SubmitOutcome(record, attached=True, info=info)  # outputs appear as it runs (or as its upstream chain does)
    if state != State.COMPLETED:
        return None
    if sub.force:
        return SubmitOutcome(
            record, attached=False, info=info, why_new=f"job {record.job_id} succeeded, but a new job was asked for (forced)"
        )
    bring_outputs(sub, record)
    missing = sub.missing()
    if missing:
        gone = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        return SubmitOutcome(record, attached=False, info=info, why_new=f"job {record.job_id} succeeded, but its output {gone} is gone")
    return SubmitOutcome(record, attached=True, info=info)


def _image_file(sub) -> str | None:
    """The image file params name for the job (orchestrator.image: x.sif), if any: provenance records it."""
    container = sub.plan.container
    return container.file if container is not None else None
