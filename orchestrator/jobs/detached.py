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
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator import __version__
from orchestrator.config import params
from orchestrator.errors import OrchestratorError, PipelineError, PlanError
from orchestrator.jobs import arrays, backends, ledger, submission
from orchestrator.pipeline import dvclock, fingerprint, invocation, stages
from orchestrator.scripts import render
from orchestrator.scripts.matrix import write_script
from orchestrator.scripts.plan import Plan
from orchestrator.scripts.quoting import join as shell_join
from orchestrator.scripts.workspace import SCRIPTS_DIR, Workspace
from orchestrator.slurm import commands, limits
from orchestrator.slurm import config as slurm_config
from orchestrator.slurm.states import State
from orchestrator.util import files
from orchestrator.util.runner import Runner

RECORD_ITEM = "orchestrator:record"


@dataclass(frozen=True)
class ItemJob:
    """An item and the job that makes it, newly submitted or attached to: a row of
    ``orchestrator submit``'s table."""

    item: str
    job_id: str
    attached: bool
    state: State
    after: tuple[str, ...] = ()  # job ids it waits for
    deferred: bool = False  # waits for room under the site's MaxSubmitJobs: a later wave submits it (no job yet)


# `orchestrator submit --next-wave`'s exit status when no item is left to submit: the
# recording job then runs the final `dvc repro` (0 means a further wave was submitted).
NO_WAVE_LEFT = 3


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
    if dvclock.mend(root):  # an earlier submit killed while DVC wrote its lock file
        say(f"{root / '.dvc/tmp/rwlock'} was cut short by a killed DVC process: reset to an empty lock")
    batch = stale(root, cluster, runner, targets, force)
    if found := unplannable(batch.ws, targets):
        raise PlanError(f"cannot submit to {batch.ws.cluster}: nothing was submitted", [f"{who}: {why}" for who, why in found])
    backend = backends.SbatchBackend(root, runner, batch.ws.profile.profile.scheduler.cluster_name)
    if since is not None:
        (batch,) = ended_since([batch], backend, since, say)
        if followed(batch):
            say("every item of this submission has had its job: no further wave")
            return []
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


@dataclass
class Batch:
    """One workspace's stale items, planned and fingerprinted: what :func:`queue` submits.
    ``label`` tells the workspace's items apart in messages (a sweep's point)."""

    ws: Workspace
    order: list[str]  # dvc.yaml's order
    plans: dict[str, Plan]
    prints: dict[str, str]
    outs: dict[str, tuple[str, ...]]
    upstream: dict[str, list[str]]
    force: bool
    label: str = ""

    def named(self, item: str) -> str:
        return f"{self.label} {item}" if self.label else item

    def without(self, names: set[str]) -> Batch:
        keep = [n for n in self.order if n not in names]
        pick = lambda mapping: {n: mapping[n] for n in keep}  # noqa: E731
        upstream = {n: [u for u in self.upstream[n] if u not in names] for n in keep}
        return Batch(self.ws, keep, pick(self.plans), pick(self.prints), pick(self.outs), upstream, self.force, self.label)

    def upstream_first(self) -> list[str]:
        """The items, each after every item it depends on (level by level, each level in ``order``)."""
        return [name for level in _levels(self.order, self.upstream) for name in level]

    def downstream_of(self, names: set[str]) -> set[str]:
        """``names`` and every item that depends on one of them, directly or not."""
        found = set(names)
        for name in self.upstream_first():
            if any(u in found for u in self.upstream[name]):
                found.add(name)
        return found


def stale(root: Path, cluster: str | None, runner: Runner, targets: Sequence[str] = (), force: bool = False, label: str = "") -> Batch:
    """The stale orchestrated items of ``targets`` in the workspace ``root``, planned (one
    load of the DVC project); nothing is written or submitted."""
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    ws = Workspace.open(root, cluster, runner, form="sbatch")
    params.require_switched(params.load(root), ws.cluster, "submitted")
    if not ws.profile.profile.uses_slurm:
        raise OrchestratorError(
            f"`orchestrator submit` queues jobs on Slurm; profile {ws.cluster!r} has no scheduler",
            hints=["run the pipeline here with `dvc repro`, or pick a Slurm profile with --cluster"],
        )
    stages.check_lock(root)
    # DVC names stages relative to the working directory, as `dvc -C` would run: from the project.
    try:
        with files.chdir(root), Repo(str(root)) as repo:
            force = force or invocation.forced()
            order, stale_plain = _stale_in_order(repo, ws, targets, force)
            if stale_plain:  # before fingerprinting: their outputs, which it reads, may not exist yet
                raise PipelineError(
                    "stale stages that do not run through the orchestrator feed the items to submit",
                    [f"{name}: run `dvc repro {name}` first" for name in stale_plain],
                )
            fps = fingerprint.Fingerprinter(root, repo, ws.script_of, fingerprint.producers(root), every_stage=True)
            prints = {name: fps.of(name) for name in order}
            outs, deps = {}, {}
            for name in order:
                outs[name], deps[name] = _files(fps.stage(name), root)
    except DvcException as exc:
        raise PipelineError("DVC cannot work out what is stale", stages.dvc_problems(exc, root)) from exc
    plans = {name: ws.plan(ws.jobs[name]) for name in order}
    problems = [f"{n}: {p}" for n, plan in plans.items() for p in plan.problems]
    if problems:
        raise PlanError(f"cannot submit to {ws.cluster}", problems)
    upstream = {name: _upstream(name, deps[name], order, outs) for name in order}
    position = {name: i for i, name in enumerate(ws.jobs)}  # dvc.yaml's order: an array's tasks follow its matrix
    return Batch(ws, sorted(order, key=position.__getitem__), plans, prints, outs, upstream, force, label)


def unplannable(ws: Workspace, targets: Sequence[str]) -> list[tuple[str, str]]:
    """The items of ``targets`` (all when none) that call ``orchestrator run`` in a way their
    params made unplannable: they are no job of the workspace, and would go unsubmitted unsaid."""
    found = ws.item_problems
    if not targets or not found:
        return found
    chosen = {i.name for i in ws.items(targets)}
    chosen |= {f"stage {i.group}" for i in ws.items(targets)}
    return [(who, why) for who, why in found if who in chosen]


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
    new = [(i, n) for i, (b, book) in enumerate(zip(batches, books, strict=True)) for n in b.order if not _followed(book, n, b.prints[n])]
    deferred = _wave(batches, runner, new, waves, say)
    config, _ = slurm_config.read(runner)
    max_size = arrays.max_array_size(config.get("MaxArraySize") if config else None)
    done: dict[tuple[int, str], ItemJob] = {}
    levels = [_levels(b.order, b.upstream) for b in batches]
    for depth in range(max((len(lv) for lv in levels), default=0)):
        subs: dict[tuple[int, str], submission.Submission] = {}
        for i, b in enumerate(batches):
            for name in levels[i][depth] if depth < len(levels[i]) else ():
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


def _levels(order: list[str], upstream: dict[str, list[str]]) -> list[list[str]]:
    """``order`` cut into levels, each in ``order``: an item's upstream items are all in earlier levels."""
    depth: dict[str, int] = {}

    def deep(name: str) -> int:
        if name not in depth:
            depth[name] = 1 + max((deep(u) for u in upstream[name] if u in upstream), default=-1)
        return depth[name]

    for name in order:
        deep(name)
    return [[n for n in order if depth[n] == d] for d in range(max(depth.values(), default=-1) + 1)]


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


def followed(batch: Batch) -> bool:
    """Whether every item of ``batch`` has a job queued or running (nothing to submit)."""
    book = ledger.Ledger(batch.ws.root)
    return all(_followed(book, name, batch.prints[name]) for name in batch.order)


def _followed(book: ledger.Ledger, name: str, fp: str) -> bool:
    """Whether ``name``'s job for ``fp`` is queued or running as far as the ledger knows
    (it will be attached to, not submitted again, forced or not)."""
    rec = book.history(name).latest(fp)
    return rec is not None and rec.state.active


def _wave(batches: Sequence[Batch], runner: Runner, new: list[tuple[int, str]], waves: bool, say) -> set[tuple[int, str]]:
    """The items of ``new`` ((batch, item), every batch's in its order) left for a later
    wave: none when the site's MaxSubmitJobs leaves room for all of them and the recording
    job. Without ``waves`` or without room for one item, refuse before anything is submitted."""
    import getpass

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


def _stale_in_order(repo, ws: Workspace, targets: Sequence[str], force: bool = False) -> tuple[list[str], list[str]]:
    """Orchestrated items to submit, upstream first; and stale plain stages feeding them."""
    import networkx as nx

    graph = repo.index.graph  # edges point from a stage to the stages it depends on
    by_name = {s.addressing: s for s in graph}
    chosen = {s.addressing for t in targets for s in repo.stage.collect(t, with_deps=True, glob="*" in t)} if targets else set(by_name)
    if force:
        stale = {name for name in chosen if name in ws.jobs}
    else:
        stale = {name for name in repo.status(targets=list(targets) or None, with_deps=bool(targets)) if name in chosen}
    for name in list(stale):  # what depends on a stale item will change too
        stale |= {s.addressing for s in nx.ancestors(graph, by_name[name])} & chosen
    order = [s.addressing for s in reversed(list(nx.topological_sort(graph))) if s.addressing in stale]
    orchestrated = [n for n in order if n in ws.jobs]
    feeding = {s.addressing for n in orchestrated for s in nx.descendants(graph, by_name[n])}
    plain = [n for n in order if n not in ws.jobs and n in feeding]
    return orchestrated, plain


def _files(stage, root: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(outs, deps) of an item's DVC stage, relative to the project root."""
    rel = lambda entry: os.path.normpath(os.path.relpath(os.path.join(stage.wdir, entry.def_path), root))  # noqa: E731
    return tuple(rel(o) for o in stage.outs), tuple(rel(d) for d in stage.deps)


def _upstream(name: str, deps: Sequence[str], order: list[str], outs: dict[str, tuple[str, ...]]) -> list[str]:
    """Items in ``order`` whose outputs ``name`` depends on."""
    producers = {out: item for item in order for out in outs[item]}
    return sorted({p for d in deps for p in fingerprint.producers_of(d, producers) if p != name})


@dataclass(frozen=True)
class RecordingJob:
    """What the job run once every job has ended does: ``record`` (always), then ``then``."""

    item: str  # its name in the ledger
    record: list[str]
    then: list[str] | None = None  # exec'd in attach-only mode when given (`dvc repro`)
    targets: tuple[str, ...] = ()
    script: str = "record.sbatch"  # its file name under .orchestrator/scripts
    manual: tuple[str, ...] = ()  # what to run by hand instead (default: ``record``)
    does: str = "it records the results"
    # Items wait for room under MaxSubmitJobs: after recording, this submits the next wave
    # (exit 0) or finds none left (exit NO_WAVE_LEFT), and only then does ``then`` run.
    next_wave: list[str] | None = None
    waiting: int = 0  # items left for later waves (in its ledger record, for `orchestrator status`)

    @property
    def by_hand(self) -> str:
        return shell_join(self.manual or self.record)


def submit_recorder(ws: Workspace, backend: backends.SbatchBackend, job: RecordingJob, job_ids: list[str], now, say) -> ItemJob | None:
    """The job that records results in DVC once every job has ended."""
    partition = ws.profile.profile.scheduler.service_partition
    if not job_ids:
        say(f"nothing new to wait for: run `{job.by_hand}` to record finished jobs")
        return None
    if partition is None:
        say(f"when the jobs end, run `{job.by_hand}`: {job.does}")
        return None
    book = ledger.Ledger(ws.root)
    with book.locked(job.item) as records:
        # Two submits of the same matrix share one recording job: a second
        # `dvc repro` would only collide with the first on DVC's lock.
        for rec in reversed(records.records):
            if rec.state.active and set(job_ids) <= set(rec.provenance.get("after", ())):
                info = backend.query([rec.job_id]).get(rec.job_id)
                if info is not None and info.state.active:
                    say(f"recording job {rec.job_id} (submitted earlier) records these jobs too")
                    return ItemJob(job.item, rec.job_id, True, info.state, tuple(job_ids))
        text = (
            render.environment()
            .get_template("record.sh.j2")
            .render(
                version=__version__,
                workspace=ws.absolute_root,
                account=ws.params.settings.account,
                partition=partition,
                dependency="afterany:" + ":".join(job_ids),
                log=".orchestrator/logs/record-%j.log",
                record=shell_join(job.record),
                repro=shell_join(job.then) if job.then else None,
                next_wave=shell_join(job.next_wave) if job.next_wave else None,
                no_wave_left=NO_WAVE_LEFT,
                profile=ws.cluster,
            )
        )
        script = ws.root / SCRIPTS_DIR / job.script
        write_script(script, text)
        (ws.root / ".orchestrator/logs").mkdir(parents=True, exist_ok=True)  # Slurm opens the log first (a sweep submits nothing else here)
        try:
            job_id = backend.sbatch(script, ws.absolute_root, job.item)
        except backends.Refused as exc:
            raise backends.SchedulerError(
                f"the recording job was refused: {exc.stderr.strip()}", hints=[f"the jobs are submitted; run `{job.by_hand}` when they end"]
            ) from exc
        records.append(
            ledger.Record(
                item=job.item,
                fingerprint="",
                backend="slurm",
                job_id=job_id,
                profile=ws.cluster,
                script=os.path.relpath(script, ws.root),
                submitted_at=now(),
                log=f".orchestrator/logs/record-{job_id}.log",
                provenance={"after": list(job_ids), "targets": list(job.targets), **({"waiting": job.waiting} if job.waiting else {})},
            )
        )
    goes_on = ", then submits the next wave" if job.next_wave else ""
    say(f"recording job {job_id} records the results when they end{goes_on} (log .orchestrator/logs/record-{job_id}.log)")
    return ItemJob(job.item, job_id, False, State.PENDING, tuple(job_ids))
