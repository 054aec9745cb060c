"""Detached runs: submit every stale orchestrated item at once, then leave.

``dvc repro`` runs stages one after another, so a matrix of N jobs takes N job
durations and needs a login-node process for all of it. ``orchestrator submit``
instead submits every stale item (stale as DVC sees it, plus what depends on
it) in one go, downstream items with ``--dependency=afterok`` on their upstream
jobs, and returns. When the profile names a ``service_partition``, a last small
job, dependent on all of them, runs ``dvc repro --keep-going`` in attach-only
mode: every orchestrated stage attaches to its finished job (no resubmission),
DVC records the items that succeeded, and plain downstream stages run. Without
one, a ``dvc repro`` by hand does the same.

Waves: where the site's MaxSubmitJobs leaves room for fewer jobs than the stale items
need, the first items (upstream first) that fit are submitted with the recording job,
and that job, once it has recorded them, submits the next wave (``orchestrator submit
--next-wave``) with a recording job of its own, until every item has had its job. Only
the last runs ``dvc repro``. A wave never submits an item again whose job, since the
first wave, ended (succeeded or not), nor what depends on one that failed: a failure is
reported at the end, not retried in a loop.

This module submits; what is stale is :mod:`~orchestrator.jobs.batch`'s, what a wave holds
:mod:`~orchestrator.jobs.waves`'s, and the recording job :mod:`~orchestrator.jobs.recorder`'s.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path

from orchestrator.errors import PlanError
from orchestrator.jobs import arrays, backends, ledger, submission
from orchestrator.jobs.batch import Batch, ItemJob, levels, stale, unplannable
from orchestrator.jobs.recorder import RECORD_ITEM, RecordingJob, submit_recorder
from orchestrator.jobs.waves import deferred as waves_left
from orchestrator.jobs.waves import ended_since, followed, followed_in
from orchestrator.scripts import costs, render
from orchestrator.scripts.matrix import write_script
from orchestrator.slurm import commands
from orchestrator.slurm import config as slurm_config
from orchestrator.slurm.states import State
from orchestrator.util import files
from orchestrator.util.runner import Runner


def submit(
    root: Path,
    cluster: str | None,
    runner: Runner,
    targets: Sequence[str] = (),
    say: Callable[[str], None] = print,
    now: Callable[[], float] | None = None,
    force: bool = False,
    since: float | None = None,
) -> list[ItemJob]:
    """Submit the stale items of ``targets`` (all when ``force``, even those whose jobs
    succeeded: see :mod:`orchestrator.pipeline.invocation`), then the job that records them.

    ``since``: this is a later wave of a submission whose first wave was submitted then
    (the recording job's ``--next-wave``): items with a job since then are not submitted
    again. Returns no rows when such a wave finds nothing left to submit."""
    import time

    now = now or time.time
    batch = stale(root, cluster, runner, targets, force, mend=say)  # an earlier submit or repro may have been killed mid-write
    if found := unplannable(batch.ws, targets):
        raise PlanError(f"cannot submit to {batch.ws.cluster}: nothing was submitted", [f"{who}: {why}" for who, why in found])
    if since is None:  # a later wave's were said by the first
        for line in costs.warnings(batch.plans[name] for name in batch.order):
            say(f"warning: {line}")
    backend = backends.SbatchBackend(root, runner, batch.ws.profile.profile.scheduler.cluster_name)
    if since is not None:
        (batch,) = ended_since([batch], backend, since, say)
        if followed(batch):
            say("every item of this submission has had its job: no further wave")
            return []
    if since is None and (tested := _smoke_tested(batch)):
        say(tested)
    started = now()
    (done,) = queue([batch], runner, started, say, waves=True)
    active = list(dict.fromkeys(commands.array_of(j.job_id) for j in done if j.state.active and not j.deferred))
    again = ["orchestrator", "submit", *targets, *(["--cluster", cluster] if cluster else []), *(["--force"] if force else [])]
    record = RecordingJob(
        RECORD_ITEM,
        ["orchestrator", "record", *targets],
        ["dvc", "repro", "--keep-going", *targets],
        tuple(targets),
        manual=("dvc", "repro", *targets),
        does="it attaches to them and records the results",
        next_wave=[*again, "--next-wave", repr(since if since is not None else started)] if any(j.deferred for j in done) else None,
        waiting=sum(j.deferred for j in done),
    )
    recorder = submit_recorder(batch.ws, backend, record, active, now, say)
    return [*done, *([recorder] if recorder else [])]


def _smoke_tested(batch: Batch) -> str | None:
    """Which shapes of the items about to be submitted passed `orchestrator smoke`, and when."""
    from orchestrator.errors import OrchestratorError
    from orchestrator.jobs import smoke

    try:
        return smoke.summary_line(batch.ws, batch.plans)
    except (OrchestratorError, ValueError):  # a hint only: it never stops a submission
        return None


def queue(
    batches: Sequence[Batch], runner: Runner, at: float, say: Callable[[str], None] = print, waves: bool = False
) -> list[list[ItemJob]]:
    """Attach every batch's items to their jobs or submit them, level by level (an item's
    upstream jobs are known, to wait for, before it is submitted); items of one shape, from
    any of the batches, as the tasks of one array. One list of rows per batch, in its order.

    Over the site's MaxSubmitJobs: refused, nothing submitted; with ``waves`` (the caller
    submits a recording job that goes on with the rest) the first items that fit are
    submitted and the others are rows marked ``deferred``."""
    if not batches:
        return []
    first = batches[0].ws
    backend = backends.SbatchBackend(first.root, runner, first.profile.profile.scheduler.cluster_name)
    books = [ledger.Ledger(b.ws.root) for b in batches]
    new = [(i, n) for i, (b, book) in enumerate(zip(batches, books, strict=True)) for n in b.order if not followed_in(book, n, b.prints[n])]
    deferred = waves_left(batches, runner, new, waves, say)
    config, _ = slurm_config.read(runner)
    max_size = arrays.max_array_size(config.get("MaxArraySize") if config else None)
    done: dict[tuple[int, str], ItemJob] = {}
    leveled = [levels(b.order, b.upstream) for b in batches]
    for depth in range(max((len(lv) for lv in leveled), default=0)):
        subs: dict[tuple[int, str], submission.Submission] = {}
        for i, b in enumerate(batches):
            for name in leveled[i][depth] if depth < len(leveled[i]) else ():
                if (i, name) in deferred:
                    done[i, name] = ItemJob(name, "", False, State.PENDING, deferred=True)
                    continue
                plan = b.plans[name]
                text = render.render(plan)
                script = b.ws.script_path(plan)
                write_script(script, text)
                after = tuple(
                    done[i, u].job_id for u in b.upstream[name] if (i, u) in done and done[i, u].state.active and not done[i, u].deferred
                )
                subs[i, name] = submission.Submission(b.ws, plan, script, text, b.prints[name], b.outs[name], after, b.force)
        if subs:
            done.update(_submit_level(batches, books, subs, backend, runner, at, max_size, say))
    return [[done[i, name] for name in b.order] for i, b in enumerate(batches)]


def _submit_level(
    batches: Sequence[Batch],
    books: Sequence[ledger.Ledger],
    subs: dict[tuple[int, str], submission.Submission],
    backend: backends.SbatchBackend,
    runner: Runner,
    at: float,
    max_size: int,
    say: Callable[[str], None],
) -> dict[tuple[int, str], ItemJob]:
    """Attach the items of one level to their jobs, or submit them: items of one shape as
    the tasks of one array, the rest alone. Every item's ledger lock is held throughout,
    taken in (workspace, name) order (so two submits of overlapping matrices cannot deadlock)."""
    done: dict[tuple[int, str], ItemJob] = {}
    files.raise_open_files_limit(len(subs) + 256)  # one open lock file per item
    with contextlib.ExitStack() as stack:
        held = {key: stack.enter_context(books[key[0]].locked(key[1])) for key in sorted(subs, key=lambda k: (str(books[k[0]].dir), k[1]))}
        tasks: dict[tuple[int, str], submission.Task] = {}
        for key, sub in subs.items():
            outcome = submission.existing(held[key], sub, backend, runner)
            if outcome is not None and outcome.why_new is None:
                state = outcome.info.state if outcome.info else outcome.record.state
                done[key] = ItemJob(key[1], outcome.record.job_id, True, state)
            else:
                tasks[key] = submission.Task(held[key], sub, outcome.why_new if outcome else None)
        # Items retried off failed nodes each avoid their own nodes: they go alone.
        alone = [k for k, t in tasks.items() if submission.excluded(t.records, t.sub.fingerprint)]
        keys = {}  # a member -> its key
        candidates = []
        for key, task in tasks.items():
            if key not in alone:
                member = arrays.Member(task.sub.plan, task.sub.text, task.sub.fingerprint)
                keys[id(member)] = key
                candidates.append((member, task.sub.after))
        parallel = batches[0].ws.params.settings.array_parallel
        groups, singles = arrays.group(candidates, max_size, parallel)
        for array in groups:
            members = [keys[id(m)] for m in array.members]
            outcomes = submission.submit_array([tasks[k] for k in members], array, backend, runner, at)
            for key, outcome in zip(members, outcomes, strict=True):
                done[key] = ItemJob(key[1], outcome.record.job_id, False, State.PENDING, array.after)
            array_id = commands.array_of(outcomes[0].record.job_id)
            waits = f" after {','.join(array.after)}" if array.after else ""
            span = f"{batches[members[0][0]].named(members[0][1])} ... {batches[members[-1][0]].named(members[-1][1])}"
            say(f"array {array_id}: {len(members)} items ({span}){waits}; logs {array.log.replace('%A', array_id)}")
        for key in [*alone, *(keys[id(m)] for m in singles)]:
            task = tasks[key]
            outcome = submission.submit_one(task.records, task.sub, backend, runner, at, task.why_new)
            done[key] = ItemJob(key[1], outcome.record.job_id, False, State.PENDING, task.sub.after)
            why = f" ({outcome.why_new})" if outcome.why_new else ""
            after = f" after {','.join(task.sub.after)}" if task.sub.after else ""
            say(f"{batches[key[0]].named(key[1])}: job {outcome.record.job_id}{after}{why}")
    return {key: done[key] for key in subs}
