"""Recording finished jobs in DVC: every item whose job succeeded, in one process.

After ``orchestrator submit`` nothing waits for the jobs; their results reach dvc.lock
when something records them. ``dvc repro`` in attach-only mode does it stage by stage,
and every stage starts an ``orchestrator run`` that opens the DVC project again: N
items cost N project loads, which grew to about an hour at 1,000 items. Here the
project is loaded once, the scheduler asked once for every job, and each item whose
job for its current fingerprint succeeded, with all its outputs there, is saved and
committed as ``dvc commit`` would (DVC hashes its deps and outs) and written to
dvc.lock in one dump per dvc.yaml: the lock ``dvc repro`` writes for the same outputs.

Failed, cancelled and still-running items are left as they are (listed, with the job
and its log); a ``dvc repro`` afterwards finds the recorded items up to date and runs
what is downstream.

The recording job of ``orchestrator submit`` ends with ``record --repro-exit N`` (``settle``):
once its ``dvc repro --keep-going`` has run, which fails on every item whose job did not
succeed, it records anything left and tells those items, and the stages after them, from a
real failure (a stage that failed with nothing unrecorded upstream of it, DVC stopping):
only that fails the job (:func:`verdict`).

It is also the way back after a process killed while DVC wrote its own files
(:mod:`orchestrator.pipeline.dvcfiles`), on every profile: those are mended first, and
the items that finished since the last readable dvc.lock are recorded from the ledger.
On a profile without a scheduler a job is a process of the run that started it, so its
state is the ledger's: a process that ended without recording one was cut off with its
run, and ``dvc repro`` runs that item again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.analysis import energy
from orchestrator.errors import PipelineError
from orchestrator.jobs import backends, ledger, provenance, submission
from orchestrator.pipeline import dvcfiles, fingerprint, stages
from orchestrator.scripts.workspace import Workspace
from orchestrator.slurm.states import JobInfo, State
from orchestrator.util import files
from orchestrator.util.runner import Runner


@dataclass
class Recorded:
    recorded: list[str] = field(default_factory=list)
    up_to_date: list[str] = field(default_factory=list)
    unfinished: list[tuple[str, str]] = field(default_factory=list)  # (item, why: job and state)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (item, job, state and log)
    # With ``settle``: the plain stages still stale, each with the stale stages upstream of it.
    left: list[tuple[str, list[str]]] = field(default_factory=list)


def record(
    root: Path,
    cluster: str | None,
    runner: Runner,
    targets: Sequence[str] = (),
    say: Callable[[str], None] = print,
    settle: bool = False,
) -> Recorded:
    """Record every orchestrated item of ``targets`` (all without) whose job succeeded.

    ``settle``: after ``dvc repro --keep-going targets`` (the recording job's last step): the
    items of the targets' upstream stages too, as that repro covers them, and in ``left`` the
    plain stages it left stale."""
    from dvc.exceptions import DvcException
    from dvc.repo import Repo, lock_repo

    stages.check_lock(root)
    dvcfiles.mend(root, runner, say)  # a process killed while DVC wrote its files (a submit, a repro, an earlier record)
    ws = Workspace.open(root, cluster, runner)
    slurm = ws.profile.profile.uses_slurm
    if slurm:
        ws = dataclasses.replace(ws, form="sbatch")  # the form `submit` rendered
    backend: backends.Backend = (
        backends.SbatchBackend(root, runner, ws.profile.profile.scheduler.cluster_name) if slurm else backends.ProcessBackend(root, runner)
    )
    book = ledger.Ledger(root)
    found = Recorded()
    try:
        # DVC names stages relative to the working directory: from the project, as `dvc -C`.
        with files.chdir(root), Repo(str(root)) as repo, lock_repo(repo):
            scope = _scope(repo, targets, settle)
            chosen = [s for s in scope if s.addressing in ws.jobs]
            # The targets as given (all: none): DVC collects each target named apart, which
            # for every item of a 1,000-item matrix re-read dvc.yaml a thousand times.
            names = {s.addressing for s in (scope if settle else chosen)}
            stale = {n for n in repo.status(targets=list(targets) or None, with_deps=settle) if n in names} if names else set()
            prints = fingerprint.Fingerprinter(
                root, fingerprint.DvcStages(repo, every_stage=True), ws.script_of, fingerprint.producers(root)
            )
            latest = {}
            for stage in chosen:
                if stage.addressing not in stale:
                    found.up_to_date.append(stage.addressing)
                    continue
                rec = book.history(stage.addressing).latest(prints.of(stage.addressing))
                if rec is None:
                    found.unfinished.append((stage.addressing, "no job submitted for its current script and inputs"))
                else:
                    latest[stage.addressing] = (stage, rec)
            # The recording job starts as the last job ends, before the accounting may have it: asked again.
            ids = [rec.job_id for _, rec in latest.values()]
            if slurm:
                infos = submission.lookup(backend, ids, live=[rec.job_id for _, rec in latest.values() if rec.state.active])
            else:
                infos = _processes(backend, [rec for _, rec in latest.values()])
            # Their cluster's accounting (every run's time and energy), kept in the provenance of
            # those that write metrics: one more sacct for all of them.
            kept = [r.job_id for st, r in latest.values() if any(o.metric for o in st.outs) and _completed(infos.get(r.job_id))]
            acct = energy.query_accounting(runner, kept) if kept and slurm else None
            to_dump: dict[Any, list] = {}  # DVC's dvc.yaml files (DVC has no types) and their stages
            for name, (stage, rec) in latest.items():
                info = infos.get(rec.job_id)
                state = info.state if info else rec.state
                if state.active or info is None:
                    found.unfinished.append((name, f"job {rec.job_id} {state.value}"))
                    continue
                if not slurm and info.state == State.UNKNOWN:
                    found.unfinished.append((name, f"process {rec.job_id} ended with the run that started it; `dvc repro` runs it again"))
                    continue
                with book.locked(name) as records:
                    records.update(rec.job_id, state=info.state, exit_code=info.exit_code, elapsed_s=info.elapsed_s)
                done = info.state == State.COMPLETED
                missing = [o.def_path for o in stage.outs if not o.exists and not provenance.is_provenance(o.def_path)] if done else []
                if info.state != State.COMPLETED or missing:
                    why = f"job {rec.job_id} {info.state.value}" + (f", did not create {', '.join(missing)}" if missing else "")
                    found.failed.append((name, f"{why}; log {rec.log}"))
                    continue
                metrics = [o.def_path for o in stage.outs if o.metric]
                if metrics:  # as a foreground run writes it: before DVC hashes the outputs (it may be one)
                    history = book.records(name)
                    done_rec = next((r for r in reversed(history) if r.job_id == rec.job_id), rec)  # with the state just recorded
                    provenance.write_beside(root, metrics, provenance.of(done_rec, history, acct), [o.def_path for o in stage.outs])
                stage.save()
                stage.commit()
                to_dump.setdefault(stage.dvcfile, []).append(stage)
                found.recorded.append(name)
            for dvcfile, changed in to_dump.items():
                dvcfile.dump_stages(changed, update_pipeline=False)  # one write of dvc.lock for all of them
            if settle:
                found.left = _left(repo, scope, stale - set(found.recorded), set(ws.jobs))
    except DvcException as exc:
        raise PipelineError("DVC cannot record the finished items", stages.dvc_problems(exc, root)) from exc
    dvcfiles.keep(root)
    return found


def _processes(backend: backends.Backend, records: Sequence[ledger.Record]) -> dict[str, JobInfo]:
    """The jobs of a profile without a scheduler: an ended one as its ledger entry says (its
    process is gone, and only the run that waited for it knew how it ended); an active one
    as its process is (running, or ended unrecorded: UNKNOWN)."""
    ended = {
        r.job_id: JobInfo(r.job_id, r.state, "process", exit_code=r.exit_code, elapsed_s=r.elapsed_s) for r in records if not r.state.active
    }
    return {**ended, **backend.query([r.job_id for r in records if r.state.active])}


def _completed(info) -> bool:
    return info is not None and info.state == State.COMPLETED


def _scope(repo, targets: Sequence[str], with_deps: bool = False) -> list:
    """The stages of ``targets`` (all of them without targets), ``with_deps`` those upstream too."""
    if targets:
        found = [s for t in targets for s in repo.stage.collect(t, with_deps=with_deps, glob="*" in t)]
    else:
        found = list(repo.index.stages)
    return list(dict.fromkeys(found))


def _left(repo, scope: Sequence, stale: set[str], items: set[str]) -> list[tuple[str, list[str]]]:
    """The plain stages of ``scope`` still stale, each with the stale stages upstream of it.
    A stage that always runs again (``always_changed``) is stale for DVC even just after it ran."""
    import networkx as nx

    changing = {s.addressing for s in scope if s.always_changed}
    stale = stale - changing
    graph = repo.index.graph  # edges from a stage to those it depends on
    return [
        (s.addressing, sorted(u.addressing for u in nx.descendants(graph, s) if u.addressing in stale))
        for s in scope
        if s.addressing in stale and s.addressing not in items
    ]


@dataclass(frozen=True)
class Verdict:
    """The recording job's last word: what is in dvc.lock, what is not and why, and whether
    anything failed that is not explained by an item whose job did not succeed."""

    lines: list[str]
    ok: bool


def verdict(found: Recorded, repro_exit: int = 0, shown: int = 10) -> Verdict:
    """Items whose jobs failed, were cancelled or never ran (and the stages after them) are
    reported: they are not this job's failure, and ``orchestrator submit`` submits them again.
    A plain stage left stale with nothing stale upstream of it failed (or DVC stopped before
    it), and so did a ``dvc repro`` that failed with nothing left to explain it: an error."""
    not_recorded = [*found.failed, *found.unfinished]
    after = [name for name, upstream in found.left if upstream]
    broken = [name for name, upstream in found.left if not upstream]
    head = f"{len(found.recorded) + len(found.up_to_date)} recorded"
    if not_recorded:
        head += ", not recorded: " + _listed([f"{name} ({why})" for name, why in not_recorded], shown)
    lines = [head]
    if after:
        lines.append("not run, after an item not recorded or a stage that failed: " + _listed(after, shown))
    if broken:
        lines.append(
            f"failed: {_listed(broken, shown)}: stale after `dvc repro` with nothing stale upstream "
            "(its command failed, or DVC stopped: see above)"
        )
    elif repro_exit and not not_recorded and not after:
        broken = [f"`dvc repro` exited {repro_exit}"]
        lines.append(f"failed: `dvc repro` exited {repro_exit} with every stage up to date (see above)")
    elif not_recorded:
        lines.append("that is no failure of the recording: `orchestrator submit` submits what was not recorded again")
    return Verdict(lines, ok=not broken)


def _listed(names: Sequence[str], shown: int) -> str:
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")
