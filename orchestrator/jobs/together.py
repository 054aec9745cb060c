"""A stage's items started together: what makes a matrix run in parallel under ``dvc repro``.

``dvc repro`` runs a stage's items one after another, and each item's ``orchestrator
run`` waits for its job, so a matrix of 64 shards would be 64 jobs in a row. An item
whose ``orchestrator run`` has ``--together`` first starts every item of its stage that
DVC is about to run anyway, then follows its own job; DVC's later calls for the other
items find their jobs started (or done) and attach, as after ``orchestrator submit``.

* On Slurm they are submitted as ``orchestrator submit`` would submit them: the items of
  one shape as the tasks of one job array (:func:`orchestrator.jobs.detached.queue`).
* Without Slurm they run here as parallel processes, as many at once as this machine's
  cores hold, and the first call waits for all of them (a process job ends with the
  process that ran it); the later calls find a job that succeeded with its outputs
  there, which counts as the item's result (:func:`orchestrator.jobs.submission.attach`).

Only items DVC will surely run are started: stale by DVC's own record (dvc.lock), with
the same upstream stages as the calling item, whose jobs DVC has just run, so their
inputs are final. DVC's status cannot be asked here (the ``dvc repro`` running us holds
the repository's lock), so the checks are the parts of ``Stage.changed`` that take no
lock; an item they are unsure of is left to DVC, which runs it in its turn.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator.jobs import backends, ledger
from orchestrator.jobs.submission import Submission, attach_or_submit
from orchestrator.pipeline import fingerprint
from orchestrator.scripts import render
from orchestrator.scripts.matrix import write_script
from orchestrator.scripts.workspace import Workspace
from orchestrator.slurm.states import State
from orchestrator.util.poll import Backoff, Poller
from orchestrator.util.runner import Runner

POLL_S = 0.5


def start(root: Path, ws: Workspace, item: str, runner: Runner, form: str, say: Callable[[str], None]) -> None:
    """Start ``item``'s stale siblings (and ``item``) as the module says; on Slurm return once
    they are queued, here once they have all ended."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        names = siblings(repo, ws, item)
        if len(names) < 2:
            return  # alone: nothing to gain
        fps = fingerprint.Fingerprinter(root, fingerprint.DvcStages(repo, every_stage=True), ws.script_of, fingerprint.producers(root))
        prints = {name: fps.of(name) for name in names}
        outs = {name: _outs(fps.stage(name), root) for name in names}
    if form == "sbatch":
        _queue(ws, names, prints, outs, runner, say)
    elif form == "local":
        run_here(ws, names, prints, outs, runner, say)


def siblings(repo, ws: Workspace, item: str) -> list[str]:
    """``item`` and the other items of its stage that DVC will surely run next, in dvc.yaml's order."""
    stage_name = item.split("@", 1)[0]
    graph = repo.index.graph  # edges point from a stage to the stages it depends on
    by_name = {s.addressing: s for s in graph}
    if item not in by_name:
        return [item]
    upstream = {s.addressing for s in graph.successors(by_name[item])}
    found = []
    for name in ws.jobs:
        if name.split("@", 1)[0] != stage_name or name not in by_name:
            continue
        stage = by_name[name]
        if name == item or ({s.addressing for s in graph.successors(stage)} == upstream and surely_stale(stage)):
            found.append(name)
    return found


def surely_stale(stage) -> bool:
    """Whether DVC will run ``stage``: what ``Stage.changed`` checks, without the repository
    lock it asserts; False when unsure (DVC then runs the item in its turn)."""
    try:
        if stage.frozen:
            return False
        if stage.is_callback or stage.always_changed:
            return True
        return bool(stage.changed_stage() or any(dep.status() for dep in stage.deps) or any(out.status() for out in stage.outs))
    except Exception:  # noqa: BLE001 - any doubt leaves the item to DVC, which is always right
        return False


def _outs(stage, root: Path) -> tuple[str, ...]:
    return tuple(os.path.normpath(os.path.relpath(os.path.join(stage.wdir, o.def_path), root)) for o in stage.outs)


def _queue(ws: Workspace, names: list[str], prints: dict, outs: dict, runner: Runner, say: Callable[[str], None]) -> None:
    from orchestrator.jobs import detached
    from orchestrator.jobs.batch import Batch

    plans = {name: ws.plan(ws.jobs[name]) for name in names}
    problems = [f"{name}: {p}" for name, plan in plans.items() for p in plan.problems]
    if problems:
        return  # the calling item reports its own; a sibling's are reported when DVC runs it
    batch = Batch(ws, names, plans, prints, outs, {name: [] for name in names}, force=False)
    try:
        detached.queue([batch], runner, time.time(), say)
    except backends.SchedulerError as exc:
        # A site limit (MaxSubmitJobs) refuses the lot: DVC still runs the items one by one.
        why = "; ".join([exc.headline, *exc.problems])
        say(f"not submitting {len(names)} items of {names[0].split('@', 1)[0]} together: {why}; one at a time instead")


def run_here(
    ws: Workspace, names: list[str], prints: dict, outs: dict, runner: Runner, say: Callable[[str], None], slots: int | None = None
) -> dict[str, State]:
    """Run ``names`` as processes of this machine, ``slots`` at once (what the cores hold),
    recording each in its ledger; their final states."""
    backend = backends.ProcessBackend(ws.root, runner)
    book = ledger.Ledger(ws.root)
    subs = {}
    for name in names:
        plan = ws.plan(ws.jobs[name])
        if plan.problems:
            continue  # reported when DVC runs the item
        text = render.render(plan)
        script = ws.script_path(plan)
        write_script(script, text)
        subs[name] = Submission(ws, plan, script, text, prints[name], outs[name])
    slots = slots or _slots(ws, subs)
    waiting = list(subs)
    running: dict[str, str] = {}  # job id -> item
    ended: dict[str, State] = {}
    say(f"running {len(subs)} items of {names[0].split('@', 1)[0]} here, {min(slots, len(subs))} at a time")
    poller = Poller(Backoff(first_s=POLL_S, factor=1.0, max_s=POLL_S))
    while waiting or running:
        while waiting and len(running) < slots:
            name = waiting.pop(0)
            with book.locked(name) as records:
                outcome = attach_or_submit(records, subs[name], backend, runner, time.time())
            if outcome.attached:
                ended[name] = outcome.record.state
            else:
                running[outcome.record.job_id] = name
        if not running:
            continue
        poller.sleep()
        for job_id, info in backend.query(list(running)).items():
            if info.state.active:
                continue
            name = running.pop(job_id)
            with book.locked(name) as records:
                records.update(
                    job_id, state=info.state, exit_code=info.exit_code, elapsed_s=info.elapsed_s, nodelist=info.nodelist, nodes=1
                )
            ended[name] = info.state
            if info.state != State.COMPLETED:
                say(f"{name}: exit code {info.exit_code} (its log: {subs[name].plan.log.replace('%j', 'local')})")
    return ended


def _slots(ws: Workspace, subs: dict[str, Submission]) -> int:
    """How many of ``subs`` this machine's cores run at once: each takes a core per process."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    widest = max((s.plan.nodes * s.plan.tasks_per_node * max(1, _threads(s)) for s in subs.values()), default=1)
    return max(1, cores // widest)


def _threads(sub: Submission) -> int:
    """The cores one process of ``sub`` takes (its OMP_NUM_THREADS, as the plan sets it)."""
    for key, value in sub.plan.env:
        if key == "OMP_NUM_THREADS":
            try:
                return int(str(value).strip("'\""))
            except ValueError:
                return 1
    return 1
