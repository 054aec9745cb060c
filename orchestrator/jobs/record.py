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


def record(root: Path, cluster: str | None, runner: Runner, targets: Sequence[str] = (), say: Callable[[str], None] = print) -> Recorded:
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
            chosen = _chosen(repo, ws, targets)
            # The targets as given (all: none): DVC collects each target named apart, which
            # for every item of a 1,000-item matrix re-read dvc.yaml a thousand times.
            names = {s.addressing for s in chosen}
            stale = {n for n in repo.status(targets=list(targets) or None) if n in names} if chosen else set()
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


def _chosen(repo, ws: Workspace, targets: Sequence[str]) -> list:
    """The orchestrated stages among ``targets`` (all of them without targets)."""
    if targets:
        found = [s for t in targets for s in repo.stage.collect(t, glob="*" in t)]
    else:
        found = list(repo.index.stages)
    return [s for s in dict.fromkeys(found) if s.addressing in ws.jobs]
