"""Running one item: what ``orchestrator run`` does inside a DVC stage.

plan -> render -> attach to a job with the same fingerprint or submit one
(:mod:`~orchestrator.jobs.submission`) -> wait with progress -> check the outputs.
The script run is the script ``render`` writes, byte for byte: both go through
:func:`orchestrator.scripts.plan.make_plan` and the same templates.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.analysis import energy
from orchestrator.config import params
from orchestrator.config.profile_schema import LoadedProfile
from orchestrator.errors import JobFailed, PipelineError, PlanError
from orchestrator.jobs import backends, experiment, faults, ledger, provenance, together
from orchestrator.jobs.submission import Submission, SubmitOutcome, attach_or_submit, bring_outputs
from orchestrator.pipeline import dvcfiles, fingerprint, invocation, stages
from orchestrator.scripts import render, staged_deps
from orchestrator.scripts.matrix import write_script
from orchestrator.scripts.plan import Form, Plan
from orchestrator.scripts.workspace import Workspace
from orchestrator.slurm import reasons
from orchestrator.slurm.states import JobInfo, State
from orchestrator.slurm.times import hms
from orchestrator.util import poll
from orchestrator.util.poll import Clock
from orchestrator.util.runner import Runner


@dataclass(frozen=True)
class Polling:
    # Short at first (a quick local job is noticed at once), backing off to max_s
    # (a long Slurm job costs the scheduler one query a minute).
    first_s: float = field(default_factory=lambda: poll.seconds_setting(poll.FIRST_ENV, 0.5))
    factor: float = 1.5
    max_s: float = field(default_factory=lambda: poll.seconds_setting(poll.MAX_ENV, 60))
    heartbeat_s: float = 300.0  # a "still running" line at most this often

    @property
    def backoff(self) -> poll.Backoff:
        return poll.Backoff(self.first_s, self.factor, self.max_s)


@dataclass
class Context:
    """Where an item runs from: the project, the item's DVC name and wdir."""

    root: Path
    item: str
    wdir: str = ""
    from_dvc: bool = False

    @classmethod
    def from_environment(cls, name: str | None) -> Context:
        """DVC tells a stage's command its name (DVC_STAGE) and its project (DVC_ROOT), except
        in an experiment's own workspace (``dvc exp run --temp``/``--queue``, under
        ``.dvc/tmp/exps/``): there DVC_ROOT names the repository the experiment came from,
        on purpose (DVC's queue sets it so), while the stage runs in, and must be planned
        from, the copy it is started in: the nearest folder above it holding ``.dvc``."""
        dvc_root, dvc_stage = os.environ.get("DVC_ROOT"), os.environ.get("DVC_STAGE")
        if dvc_root and dvc_stage and not name:
            here = Path.cwd()
            root = next((f for f in (here, *here.parents) if (f / ".dvc").is_dir()), Path(dvc_root))
            wdir = os.path.relpath(here, root)
            return cls(root, dvc_stage, "" if wdir == "." else wdir, from_dvc=True)
        root = _find_root(Path.cwd())
        wdir = os.path.relpath(os.getcwd(), root)
        return cls(root, name or "adhoc", "" if wdir == "." else wdir)


def _find_root(start: Path) -> Path:
    for folder in (start, *start.parents):
        if (folder / stages.PIPELINE_FILE).is_file() or (folder / ".dvc").is_dir():
            return folder
    return start


def backend_for(plan: Plan, loaded: LoadedProfile, root: Path, runner: Runner) -> backends.Backend:
    if plan.form == "sbatch":
        return backends.SbatchBackend(root, runner, loaded.profile.scheduler.cluster_name)
    return backends.ProcessBackend(root, runner, "local" if plan.form == "local" else "srun")


def run_item(
    ctx: Context,
    spec,
    cluster: str | None,
    form: Form | None,
    runner: Runner,
    clock: Clock | None = None,
    polling: Polling | None = None,
    say: Callable[[str], None] | None = None,
) -> SubmitOutcome:
    clock = clock or Clock()
    polling = polling or Polling()
    force = invocation.forced()  # read before anything is written: a bad ORCH_FORCE stops here
    say = say or _say
    ws = Workspace.open(ctx.root, cluster, runner, form)
    if ctx.from_dvc:  # DVC resolved this item from params.yaml: from the cluster's values, or nothing runs
        params.require_switched(params.load(ctx.root), ws.cluster, "run")
        # DVC waits for this stage: its files are whole now, and the copy is the way back
        # should DVC be killed while it writes them after this stage.
        dvcfiles.keep(ctx.root)
    # Inside `dvc repro` the item as DVC resolves it (its deps and outs are staged);
    # by hand, an ad-hoc job that runs where it is.
    item = stages.resolve_one(ctx.root, ctx.item, ws.overlay) if ctx.from_dvc else None
    job = stages.Job(item or stages.Item(ctx.item, ctx.item.split("@", 1)[0], "", (), ctx.wdir), spec)
    plan = ws.plan(job, staged=item is not None)
    if plan.problems:
        raise PlanError(f"cannot run {ctx.item} on {ws.cluster}", plan.problems)
    staged_deps.require([plan], ws.profile.profile, f"cannot run {ctx.item} on {ws.cluster}")
    text = render.render(plan)
    script = ws.script_path(plan)
    write_script(script, text)
    copy = experiment.detect(ctx.root)  # a DVC experiment's copy: its jobs are remembered in its project
    fp, outs, metrics = _identity(ws, ctx, text, copy.normalise if copy else str)
    submission = Submission(ws, plan, script, text, fp, outs, force=force)
    backend = backend_for(plan, ws.profile, ctx.root, runner)
    book = ledger.Ledger(ctx.root, folder=copy.ledger_dir if copy else None)
    if spec.together and ctx.from_dvc and copy is None:
        # Not in an experiment's copy: its jobs are remembered in its project, which the
        # siblings' submission does not know; there the items run one at a time.
        together.start(ctx.root, ws, ctx.item, runner, plan.form, say)

    scheduler = ws.profile.profile.scheduler
    while True:
        with book.locked(ctx.item) as records:
            outcome = attach_or_submit(records, submission, backend, runner, clock.now())
        _announce(outcome, ctx.item, ws.cluster, plan, say)
        requeued = _RequeuedOffFailedNodes(backend, book, ctx.item, outcome.record, say)
        info = wait(backend, outcome.record.job_id, ctx.item, clock, polling, say, outcome.info, requeued, scheduler.stuck_timeout_s)
        fault = None
        if info.state != State.COMPLETED:
            fault = faults.classify(info, faults.read_tail(outcome.record.log_path(ctx.root)), backend.unhealthy)
        with book.locked(ctx.item) as records:
            record = records.update(
                outcome.record.job_id,
                state=info.state,
                exit_code=info.exit_code,
                nodelist=info.nodelist or outcome.record.nodelist,
                nodes=info.nodes or outcome.record.nodes,
                elapsed_s=info.elapsed_s,
                requeues=info.requeues,
                **({"fault": fault.reason, "fault_nodes": fault.nodes} if fault else {}),
            )
            retries = len(records.trailing_faults(fp))
        outcome.record, outcome.info = record, info
        if fault is None or retries > scheduler.node_fault_retries:
            break
        delay = poll.Backoff(scheduler.retry_backoff_s, 2, math.inf).nth(retries - 1)
        without = f" without {', '.join(fault.nodes)}" if fault.nodes else ""
        say(
            f"{ctx.item}: job {record.job_id} failed on a node fault ({fault.reason}); "
            f"submitting again{without} in {delay:g} s (retry {retries} of {scheduler.node_fault_retries})"
        )
        clock.sleep(delay)
    if info.state != State.COMPLETED:
        hints = _log_hints(ctx.root, record)
        if fault is not None:
            hints.insert(0, f"node fault ({fault.reason}), after {scheduler.node_fault_retries} retries (scheduler.node_fault_retries)")
        raise JobFailed(f"{ctx.item}: job {record.job_id} {info.state.value} ({info.slurm_state}, exit code {info.exit_code})", hints=hints)
    bring_outputs(submission, record)  # made in an earlier copy of this experiment
    missing = [o for o in outs if not (ctx.root / o).exists() and not provenance.is_provenance(o)]  # that one is ours, written next
    if missing:
        raise JobFailed(
            f"{ctx.item}: job {record.job_id} succeeded but did not create {', '.join(missing)}", hints=_log_hints(ctx.root, record)
        )
    if metrics:
        with book.locked(ctx.item) as records:
            outcome.record = records.update(record.job_id, metrics=metrics)  # `status` reads MFU there
    if metrics:
        # The job's own cluster's accounting, kept with the results (a report from another cluster
        # or revision cannot ask it). slurmdbd may lag a job that just ended: then nothing is kept.
        acct = energy.query_accounting(runner, [record.job_id]) if isinstance(backend, backends.SbatchBackend) else None
        provenance.write_beside(ctx.root, metrics, provenance.of(record, book.records(ctx.item), acct), outs)
    return outcome


class _RequeuedOffFailedNodes:
    """When Slurm requeues a job after a node failed under it (``--requeue``), keep the
    pending job off that node (it may come back before the job starts) and write the
    fault into the job's record, so `status` and the ledger show it."""

    def __init__(self, backend, book: ledger.Ledger, item: str, record: ledger.Record, say) -> None:
        self.backend, self.book, self.item, self.say = backend, book, item, say
        self.seen: tuple[str, ...] = ()
        self.excluded = tuple(record.excluded)

    def __call__(self, info: JobInfo) -> None:
        if info.node_failures == self.seen:
            return
        self.seen = info.node_failures
        failed = sorted({n for nodelist in info.node_failures for n in faults.nodes_of(nodelist)})
        wanted = tuple(sorted({*self.excluded, *faults.suspects(failed, self.backend.unhealthy)}))
        if info.state == State.PENDING and wanted != self.excluded and self.backend.exclude(info.job_id, wanted):
            self.excluded = wanted
        with self.book.locked(self.item) as records:
            fault = f"NODE_FAIL on {', '.join(failed)} (Slurm requeued the job)"
            records.update(info.job_id, fault=fault, fault_nodes=tuple(failed), excluded=self.excluded)
        kept_off = f", kept off {', '.join(self.excluded)}" if self.excluded else ""
        self.say(f"{self.item}: job {info.job_id} lost a node ({', '.join(failed)}); Slurm requeued it" + kept_off)


def _announce(outcome: SubmitOutcome, item: str, cluster: str, plan: Plan, say) -> None:
    rec = outcome.record
    state = (outcome.info.state if outcome.info else rec.state).value  # as Slurm says now, not as the ledger last saw it
    if rec.adopted and outcome.attached:
        say(f"{item}: found job {rec.job_id} ({state}), submitted by an interrupted earlier run; following it")
    elif outcome.attached:
        say(f"{item}: attached to job {rec.job_id} ({state}), submitted earlier with the same script and inputs")
    else:
        if outcome.why_new:
            say(f"{item}: {outcome.why_new}; submitting a new one")
        avoiding = f", avoiding {','.join(rec.excluded)}" if rec.excluded else ""
        say(f"{item}: submitted job {rec.job_id} on {cluster} ({plan.nodes}x{plan.tasks_per_node}{avoiding}); log {rec.log}")


def _identity(
    ws: Workspace, ctx: Context, text: str, normalise: Callable[[str], str] = str
) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """The item's fingerprint (of its scripts as ``normalise`` reads them) and, inside a DVC
    stage, its declared outputs and metrics files."""
    if not ctx.from_dvc:
        return fingerprint.digest(normalise(text), []), (), ()
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    try:
        with Repo(str(ctx.root)) as repo:
            stage_of = fingerprint.DvcStages(repo)  # this item and its ancestors, from one reading of dvc.yaml
            stage = stage_of(ctx.item)
            removable = [o.def_path for o in stage.outs if not o.persist]
            if removable:
                raise PlanError(f"cannot run {ctx.item}", [stages.persist_problem(removable)])
            outs = tuple(os.path.relpath(os.path.join(stage.wdir, o.def_path), ctx.root) for o in stage.outs)
            metrics = tuple(path for path, o in zip(outs, stage.outs, strict=True) if o.metric)

            def script_of(name: str) -> str:
                return normalise(text if name == ctx.item else ws.script_of(name))

            return fingerprint.Fingerprinter(ctx.root, stage_of, script_of, fingerprint.producers(ctx.root)).of(ctx.item), outs, metrics
    except DvcException as exc:
        dvcfiles.require_readable(ctx.root)  # a cut-short file of DVC's is said as such, naming the way back
        raise PipelineError(f"DVC cannot read stage {ctx.item!r}", stages.dvc_problems(exc)) from exc


def wait(
    backend,
    job_id: str,
    item: str,
    clock: Clock,
    polling: Polling,
    say,
    info: JobInfo | None = None,
    observe: Callable[[JobInfo], None] | None = None,
    stuck_timeout_s: float = float("inf"),
) -> JobInfo:
    """Poll until the job ends; a line per change of state or pending reason and a
    heartbeat, never a flood.

    A failed query (controller or database down) is reported and retried with
    backoff; it never counts as the job's end, so it never causes a resubmission.
    A job Slurm will not start without someone acting (:mod:`~orchestrator.slurm.reasons`)
    is reported at once with what to do; after ``stuck_timeout_s`` of that, JobFailed
    (the job stays queued: a later run follows it once it is released).
    """
    # The waits between looks on the clock, cut short where the backend hears of the job's end.
    waits = Clock(clock.now, lambda seconds: backend.pause(job_id, seconds, clock.sleep))
    poller = poll.Poller(polling.backoff, clock=waits)
    last: tuple | None = (info.state, info.reason) if info else None
    last_line = clock.now()
    stuck_since: float | None = None
    while True:
        if info is not None and info.state.final:
            return info
        if info is not None:
            blocked = reasons.stuck(info)
            if blocked is None:
                stuck_since = None
            elif stuck_since is None:
                stuck_since = clock.now()
                say(f"{item}: job {job_id} will not start by itself ({blocked.reason}): {blocked.what_to_do}")
            elif clock.now() - stuck_since >= stuck_timeout_s:
                raise JobFailed(
                    f"{item}: job {job_id} has been pending for {blocked.reason} for {clock.now() - stuck_since:.0f} s; "
                    "stopped waiting (scheduler.stuck_timeout_s in the profile)",
                    hints=[blocked.what_to_do, f"the job stays queued: once it is released, a new run follows it; or `scancel {job_id}`"],
                )
        poller.sleep()
        try:
            found = backend.query([job_id])
        except backends.SchedulerError as exc:
            say(f"{item}: cannot ask the scheduler about job {job_id} ({exc.headline}); retrying in {poller.next_s:.0f} s")
            continue
        info = found.get(job_id, info)
        if info is None:
            continue
        if observe is not None:
            observe(info)
        now = clock.now()
        if (info.state, info.reason) != last or now - last_line >= polling.heartbeat_s:
            say(f"{item}: job {job_id} {describe(info)}")
            last, last_line = (info.state, info.reason), now


def describe(info: JobInfo) -> str:
    """``pending (Priority)``, ``running on node[1-2], 0:01:02 elapsed``."""
    why = f" ({info.reason})" if info.state == State.PENDING and info.reason else ""
    where = f" on {info.nodelist}" if info.nodelist else ""
    elapsed = f", {hms(info.elapsed_s)} elapsed" if info.elapsed_s is not None and info.state != State.PENDING else ""
    return f"{info.state.value}{why}{where}{elapsed}"


def _log_hints(root: Path, record: ledger.Record, lines: int = 20) -> list[str]:
    path = record.log_path(root)
    if path is None:
        return []
    hints = [f"log: {path}"]
    try:
        tail = path.read_text(errors="replace").splitlines()[-lines:]
    except FileNotFoundError:
        return [*hints, "(the log does not exist)"]
    return [*hints, f"last {len(tail)} lines:", *(f"| {line}" for line in tail)]


def _say(line: str) -> None:
    print(f"orchestrator: {line}", file=sys.stderr, flush=True)
