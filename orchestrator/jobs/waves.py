"""Waves: what a later wave of a detached submission leaves out, and what the site's
MaxSubmitJobs leaves for one.

Where MaxSubmitJobs leaves room for fewer jobs than the stale items need, the first items
(upstream first) that fit go now and the rest wait for later waves (:func:`deferred`); a
later wave never submits an item again whose job, since the first wave, ended, nor what
depends on one that failed (:func:`ended_since`).
"""

from __future__ import annotations

import getpass
from collections.abc import Callable, Sequence

from orchestrator.jobs import backends, ledger
from orchestrator.jobs.batch import Batch
from orchestrator.slurm import limits
from orchestrator.slurm.states import State
from orchestrator.util.runner import Runner


def ended_since(batches: Sequence[Batch], backend: backends.SbatchBackend, since: float, say: Callable[[str], None] = print) -> list[Batch]:
    """``batches`` less what a later wave must not submit again: items whose job for their
    script and inputs was submitted at or after ``since`` and has ended, and what depends on
    one that failed (said, with the job). Items whose jobs are still queued or running stay:
    they are attached to. One query of Slurm for all of them."""
    latest: dict[tuple[int, str], ledger.Record] = {}
    for i, b in enumerate(batches):
        book = ledger.Ledger(b.ws.root)
        for name in b.order:
            rec = book.history(name).latest(b.prints[name])
            if rec is not None and rec.backend == backend.name and rec.submitted_at >= since:
                latest[i, name] = rec
    infos = backend.query([r.job_id for r in latest.values() if r.state.active]) if latest else {}
    kept = []
    for i, b in enumerate(batches):
        ended, failed = set(), set()
        for name in b.order:
            rec = latest.get((i, name))
            info = infos.get(rec.job_id) if rec is not None else None
            state = info.state if info is not None else rec.state if rec is not None else None
            if rec is None or state is None or state.active:  # no record: no state either
                continue
            ended.add(name)
            if state != State.COMPLETED:
                failed.add(name)
                say(f"{b.named(name)}: job {rec.job_id} ended ({state.value}); not submitted again in this submission")
        blocked = b.downstream_of(failed) - ended
        for name in sorted(blocked, key=b.order.index):
            say(f"{b.named(name)}: not submitted, it depends on an item that failed")
        kept.append(b.without(ended | blocked))
    return kept


def followed(batch: Batch) -> bool:
    """Whether every item of ``batch`` has a job queued or running (nothing to submit)."""
    book = ledger.Ledger(batch.ws.root)
    return all(followed_in(book, name, batch.prints[name]) for name in batch.order)


def followed_in(book: ledger.Ledger, name: str, fp: str) -> bool:
    """Whether ``name``'s job for ``fp`` is queued or running as far as the ledger knows
    (it will be attached to, not submitted again, forced or not)."""
    rec = book.history(name).latest(fp)
    return rec is not None and rec.state.active


def deferred(batches: Sequence[Batch], runner: Runner, new: list[tuple[int, str]], waves: bool, say) -> set[tuple[int, str]]:
    """The items of ``new`` ((batch, item), every batch's in its order) left for a later
    wave: none when the site's MaxSubmitJobs leaves room for all of them and the recording
    job. Without ``waves`` or without room for one item, refuse before anything is submitted."""
    if not new:
        return set()
    ws = batches[0].ws
    recorder = 1 if ws.profile.profile.scheduler.service_partition else 0
    need = len(new) + recorder
    settings = ws.params.settings
    partition = ws.profile.profile.scheduler.partitions.get(settings.partition or ws.profile.profile.scheduler.default_partition or "")
    found = limits.submit_limits(runner, getpass.getuser(), settings.account, partition.qos if partition else None)
    tight = min(found, key=lambda limit: limit.room, default=None)
    if tight is None or need <= tight.room:
        return set()
    size = tight.room - recorder
    if not (waves and recorder and size >= 1):
        also = " and the recording job" if recorder else ""
        why = "" if recorder else " (waves need the profile's scheduler.service_partition, where the job that submits the next one runs)"
        raise backends.SchedulerError(
            f"{len(new)} item(s){also} would need {need} jobs, but {tight.what} allows {tight.limit} queued or running "
            f"(MaxSubmitJobs) and {tight.queued} are already: nothing was submitted{why}",
            hints=[
                f"submit at most {tight.room} now: `orchestrator submit TARGET...` with a part of the matrix, the rest when they end",
                "or ask the site for a higher MaxSubmitJobs (`sacctmgr show assoc user=$USER`, `sacctmgr show qos`)",
            ],
        )
    # Upstream first within each batch, so a wave never holds an item whose upstream item waits for a later one.
    ranks = [{name: r for r, name in enumerate(b.upstream_first())} for b in batches]
    ordered = sorted(new, key=lambda key: (key[0], ranks[key[0]][key[1]]))
    later = set(ordered[size:])
    say(
        f"{tight.what} allows {tight.limit} queued or running jobs (MaxSubmitJobs), {tight.queued} are: {size} of {len(new)} item(s) "
        f"submitted now, the other {len(later)} in waves, each submitted by the recording job of the one before"
    )
    return later
