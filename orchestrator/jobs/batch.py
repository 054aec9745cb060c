"""A detached submission's batch: one workspace's stale orchestrated items, planned and
fingerprinted, with what each depends on (:class:`Batch`), and the rows of ``orchestrator
submit``'s table (:class:`ItemJob`).

:func:`stale` asks DVC (one load of the project) what is stale and in which order; nothing
is written or submitted here. :mod:`~orchestrator.jobs.detached` submits a batch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config import params
from orchestrator.errors import OrchestratorError, PipelineError, PlanError
from orchestrator.pipeline import dvcfiles, fingerprint, invocation, stages
from orchestrator.scripts import staged_deps
from orchestrator.scripts.plan import Plan
from orchestrator.scripts.workspace import Workspace
from orchestrator.slurm.states import State
from orchestrator.util import files
from orchestrator.util.runner import Runner


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
        return [name for level in levels(self.order, self.upstream) for name in level]

    def downstream_of(self, names: set[str]) -> set[str]:
        """``names`` and every item that depends on one of them, directly or not."""
        found = set(names)
        for name in self.upstream_first():
            if any(u in found for u in self.upstream[name]):
                found.add(name)
        return found


def stale(
    root: Path,
    cluster: str | None,
    runner: Runner,
    targets: Sequence[str] = (),
    force: bool = False,
    label: str = "",
    mend: Callable[[str], None] | None = None,
) -> Batch:
    """The stale orchestrated items of ``targets`` in the workspace ``root``, planned (one
    load of the DVC project); nothing is written or submitted, except with ``mend``: DVC's
    files a killed process cut short are then mended (:func:`dvcfiles.mend`, saying so
    through it) once the profile is known to take the submission, else they are refused."""
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
    if mend is not None:
        dvcfiles.mend(root, runner, mend)
    else:
        dvcfiles.require_readable(root)
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
            fps = fingerprint.Fingerprinter(root, fingerprint.DvcStages(repo, every_stage=True), ws.script_of, fingerprint.producers(root))
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
    staged_deps.require(list(plans.values()), ws.profile.profile, f"cannot submit to {ws.cluster}")
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


def levels(order: list[str], upstream: dict[str, list[str]]) -> list[list[str]]:
    """``order`` cut into levels, each in ``order``: an item's upstream items are all in earlier levels."""
    depth: dict[str, int] = {}

    def deep(name: str) -> int:
        if name not in depth:
            depth[name] = 1 + max((deep(u) for u in upstream[name] if u in upstream), default=-1)
        return depth[name]

    for name in order:
        deep(name)
    return [[n for n in order if depth[n] == d] for d in range(max(depth.values(), default=-1) + 1)]


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
