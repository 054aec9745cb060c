"""A detached grid search: every point of a sweep submitted at once, recorded as DVC experiments.

``dvc exp run --queue -S ...`` then ``dvc queue start -j N`` runs a sweep with N
login-node workers, each blocked on its experiment's jobs until they end. Here the
sweep is given with DVC's own ``-S`` syntax (expanded by DVC's own parser, so
``lr=0.1,0.2``, ``range(...)``, ``choice(...)`` and ``file.yaml:key=...`` mean what
they mean to ``dvc exp run``), and each point becomes a copy of the project at
HEAD (a git worktree, under ``.dvc/tmp/``, where DVC keeps its own experiment copies)
with the point's params applied. Every point's stale items are submitted at once, and
the command returns. When every job has ended, ``orchestrator sweep --record NAME``
(the sweep's recording job runs it on profiles with a ``service_partition``) records
each point's finished items in its copy's dvc.lock and saves the copy as a DVC
experiment (``dvc exp save``): params, metrics and lock are what ``dvc exp run`` would
have committed, and outputs go to the project's DVC cache (the copies share it), so
``dvc exp show/apply/branch`` work as usual. A point with a failed item is not saved;
it is listed with the job and log, its copy kept, and the same ``sweep`` command
submits it again alone (saved points are never submitted again).

Over the site's MaxSubmitJobs the points' items go in waves (:mod:`orchestrator.jobs.detached`):
each wave's recording job saves the points that finished, then submits the next
(``orchestrator sweep --name NAME --next-wave T``, :func:`next_wave`).

The sweep's manifest (``.dvc/tmp/orchestrator-sweeps/NAME.json``) lists its points,
their experiment names and copies, and which were saved.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from orchestrator.errors import ConfigError, OrchestratorError
from orchestrator.jobs import backends, detached, record
from orchestrator.scripts.workspace import Workspace
from orchestrator.util import files
from orchestrator.util.runner import Runner

SWEEPS_DIR = ".dvc/tmp/orchestrator-sweeps"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,80}")
MAX_POINTS = 10_000  # a typo in a range() should not make a million git worktrees


@dataclass(frozen=True)
class Point:
    name: str  # the DVC experiment it becomes
    overrides: dict[str, list[str]]  # params file -> DVC's overrides (``lr=0.1``)
    folder: str  # its copy of the project, relative to the project
    saved: bool = False


@dataclass(frozen=True)
class Sweep:
    name: str
    baseline: str  # the commit every point starts from
    sets: tuple[str, ...]  # the -S arguments as given
    targets: tuple[str, ...]
    points: tuple[Point, ...]

    @staticmethod
    def path(root: Path, name: str) -> Path:
        return root / SWEEPS_DIR / f"{name}.json"

    def save(self, root: Path) -> None:
        files.atomic_write(Sweep.path(root, self.name), json.dumps(asdict(self), indent=1), durable=True)

    @classmethod
    def load(cls, root: Path, name: str) -> Sweep:
        path = Sweep.path(root, name)
        try:
            data = json.loads(path.read_text())
            points = tuple(Point(**p) for p in data.pop("points"))
            return cls(**{**data, "sets": tuple(data["sets"]), "targets": tuple(data["targets"]), "points": points})
        except FileNotFoundError:
            known = sorted(p.stem for p in path.parent.glob("*.json")) if path.parent.is_dir() else []
            raise OrchestratorError(
                f"no sweep named {name!r} in this project", hints=[f"sweeps here: {', '.join(known) or '(none)'}"]
            ) from None
        except (ValueError, TypeError, KeyError) as exc:
            raise OrchestratorError(f"the manifest of sweep {name!r} ({path}) cannot be read: {exc}") from None


def expand(sets: Sequence[str]) -> list[dict[str, list[str]]]:
    """The points of a sweep given with DVC's ``-S`` syntax, by DVC's own parser."""
    from dvc.utils.cli_parse import to_path_overrides
    from dvc.utils.hydra import get_hydra_sweeps

    if not sets:
        raise ConfigError("a sweep needs at least one -S 'param=values' (DVC's syntax, e.g. -S 'lr=0.1,0.2' -S 'seed=range(3)')")
    try:
        points = get_hydra_sweeps(to_path_overrides(list(sets)))
    except Exception as exc:  # DVC's parser raises Hydra's own exceptions, of several kinds
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"malformed sweep {' '.join(repr(s) for s in sets)}: {why}",
            hints=["DVC's syntax: -S 'lr=0.1,0.2', -S 'seed=range(0,3)', -S 'train.yaml:opt=choice(adam,sgd)'"],
        ) from None
    if len(points) > MAX_POINTS:
        raise ConfigError(f"the sweep has {len(points):,} points; at most {MAX_POINTS:,} are submitted at once", hints=["split it"])
    return points


def define(root: Path, runner: Runner, sets: Sequence[str], targets: Sequence[str] = (), name: str | None = None) -> Sweep:
    """The sweep ``sets`` makes from HEAD: its name (given, or made from HEAD and the
    sets, so the same command names the same sweep) and its points."""
    baseline = _git(runner, root, "rev-parse", "HEAD")
    if baseline is None:
        raise OrchestratorError(
            "a sweep's points are DVC experiments, which need a git commit to start from", hints=["git init && git commit"]
        )
    changed = _git(runner, root, "status", "--porcelain", "--untracked-files=no")
    if changed:
        raise OrchestratorError(
            "the workspace has uncommitted changes; every point of a sweep starts from HEAD",
            [line for line in changed.splitlines()[:5]],
            hints=["commit them (or `git stash`), then sweep"],
        )
    points = expand(sets)
    if name is None:
        name = "sweep-" + hashlib.sha256("\0".join([baseline, *sets, "", *targets]).encode()).hexdigest()[:8]
    elif not _NAME.fullmatch(name):
        raise ConfigError(f"sweep name {name!r}: use letters, digits, '.', '_' and '-' (it names DVC experiments)")
    width = len(str(len(points) - 1))
    made = tuple(
        Point(f"{name}-{i:0{width}d}", {f: list(o) for f, o in p.items()}, f"{SWEEPS_DIR}/{name}/{i:0{width}d}")
        for i, p in enumerate(points)
    )
    return Sweep(name, baseline, tuple(sets), tuple(targets), made)


def submit(
    root: Path,
    cluster: str | None,
    runner: Runner,
    sets: Sequence[str],
    targets: Sequence[str] = (),
    name: str | None = None,
    say: Callable[[str], None] = print,
    now: Callable[[], float] | None = None,
) -> tuple[Sweep, dict[str, list[detached.ItemJob]], detached.ItemJob | None]:
    """Make the sweep's copies, submit every point's stale items, then its recording job.

    The same command again (a point failed, the login node went away mid-way) submits
    only what has no job yet: each copy has its own ledger, and saved points are skipped."""
    import time

    now = now or time.time
    root = root.resolve()  # the copies are opened from inside themselves: a relative root would not name them
    sweep = define(root, runner, sets, targets, name)
    if Sweep.path(root, sweep.name).exists():
        earlier = Sweep.load(root, sweep.name)
        if earlier.baseline != sweep.baseline or earlier.sets != sweep.sets:
            raise OrchestratorError(f"sweep {sweep.name!r} exists with other params or from another commit", hints=["pick another --name"])
        sweep = earlier
    sweep.save(root)
    cache = _cache_dir(root)
    todo = [p for p in sweep.points if not p.saved]
    batches = [detached.stale(_copy(root, runner, sweep, p, cache), cluster, runner, sweep.targets, label=p.name) for p in todo]
    ws = Workspace.open(root, cluster, runner, form="sbatch")
    backend = backends.SbatchBackend(root, runner, ws.profile.profile.scheduler.cluster_name)
    jobs, recorder = _queue(ws, backend, cluster, runner, sweep, todo, batches, now(), None, say)
    return sweep, jobs, recorder


def next_wave(
    root: Path, cluster: str | None, runner: Runner, name: str, since: float, say: Callable[[str], None] = print, now=None
) -> tuple[dict[str, list[detached.ItemJob]], detached.ItemJob | None] | None:
    """The recording job's, where the site's MaxSubmitJobs cut sweep ``name`` into waves
    (the first submitted at ``since``): submit the next wave of its unsaved points' items,
    leaving out those with a job since then; None when no item is left to submit."""
    import time

    now = now or time.time
    root = root.resolve()
    sweep = Sweep.load(root, name)
    todo = [p for p in sweep.points if not p.saved and (root / p.folder).is_dir()]
    batches = [detached.stale(root / p.folder, cluster, runner, sweep.targets, label=p.name) for p in todo]
    ws = Workspace.open(root, cluster, runner, form="sbatch")
    backend = backends.SbatchBackend(root, runner, ws.profile.profile.scheduler.cluster_name)
    batches = detached.ended_since(batches, backend, since, say)
    if all(detached.followed(b) for b in batches):
        say(f"every item of sweep {name} has had its job: no further wave")
        return None
    return _queue(ws, backend, cluster, runner, sweep, todo, batches, now(), since, say)


def _queue(
    ws: Workspace,
    backend: backends.SbatchBackend,
    cluster: str | None,
    runner: Runner,
    sweep: Sweep,
    todo: list[Point],
    batches: list,
    at: float,
    since: float | None,
    say,
) -> tuple[dict[str, list[detached.ItemJob]], detached.ItemJob | None]:
    """Queue the points' items (those of one shape share arrays across the points), in waves
    where MaxSubmitJobs is short of room, then the sweep's recording job."""
    rows = detached.queue(batches, runner, at, say, waves=True)
    jobs = {p.name: js for p, js in zip(todo, rows, strict=True)}
    active = list(dict.fromkeys(j.job_id.split("_")[0] for js in jobs.values() for j in js if j.state.active and not j.deferred))
    where = ["--cluster", cluster] if cluster else []
    waits = any(j.deferred for js in jobs.values() for j in js)
    following = ["orchestrator", "sweep", "--name", sweep.name, *where, "--next-wave", repr(at if since is None else since)]
    job = detached.RecordingJob(
        f"orchestrator:sweep:{sweep.name}",
        ["orchestrator", "sweep", "--record", sweep.name, *where],
        script=f"sweep-{sweep.name}.sbatch",
        next_wave=following if waits else None,
        waiting=sum(j.deferred for js in jobs.values() for j in js),
    )
    recorder = detached.submit_recorder(ws, backend, job, active, lambda: at, say)
    return jobs, recorder


@dataclass
class Recorded:
    saved: list[str] = field(default_factory=list)  # experiment names
    unfinished: list[tuple[str, str]] = field(default_factory=list)  # (experiment, why)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (experiment, the item, job and log)


def record_points(root: Path, cluster: str | None, runner: Runner, name: str, say: Callable[[str], None] = print) -> Recorded:
    """Record every point whose items all succeeded and save it as a DVC experiment."""
    root = root.resolve()
    sweep = Sweep.load(root, name)
    found = Recorded()
    points = list(sweep.points)
    for i, point in enumerate(points):
        if point.saved:
            found.saved.append(point.name)
            continue
        copy = root / point.folder
        if not copy.is_dir():
            found.failed.append((point.name, f"its copy {point.folder} is gone: run the sweep again"))
            continue
        try:
            result = record.record(copy, cluster, runner, sweep.targets, say=lambda line: None)
        except OrchestratorError as exc:  # one point's trouble (its copy damaged by hand, say) stops no other
            found.failed.append((point.name, exc.headline))
            continue
        if result.failed:
            found.failed.append((point.name, "; ".join(f"{item}: {why}" for item, why in result.failed)))
            continue
        if result.unfinished:
            found.unfinished.append((point.name, "; ".join(f"{item}: {why}" for item, why in result.unfinished)))
            continue
        try:
            _save_experiment(copy, point.name, runner)
        except OrchestratorError as exc:
            found.failed.append((point.name, exc.headline))
            continue
        points[i] = Point(point.name, point.overrides, point.folder, saved=True)
        Sweep(sweep.name, sweep.baseline, sweep.sets, sweep.targets, tuple(points)).save(root)
        _git(runner, root, "worktree", "remove", "--force", str(copy))
        found.saved.append(point.name)
        say(f"{point.name}: saved as a DVC experiment")
    return found


def _copy(root: Path, runner: Runner, sweep: Sweep, point: Point, cache: Path) -> Path:
    """The point's copy of the project at the sweep's baseline, its params applied (made once)."""
    from dvc.utils.hydra import apply_overrides

    copy = root / point.folder
    if not (copy / ".git").exists():
        copy.parent.mkdir(parents=True, exist_ok=True)
        done = runner.run(["git", "-C", str(root), "worktree", "add", "--force", "--detach", str(copy), sweep.baseline], timeout=120)
        if done.returncode != 0:
            raise OrchestratorError(f"{point.name}: git cannot make its copy of the project: {done.stderr.strip()}")
        # One DVC cache for the project and its copies: a saved experiment's outputs are where `dvc exp apply` looks.
        files.atomic_write(copy / ".dvc/config.local", f"[cache]\n    dir = {cache}\n")
        for params_file, overrides in point.overrides.items():
            apply_overrides(str(copy / params_file), overrides)
    return copy


def _cache_dir(root: Path) -> Path:
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return Path(repo.cache.local_cache_dir)


def _save_experiment(copy: Path, name: str, runner: Runner) -> None:
    """``dvc exp save`` in the copy, with the outputs DVC does not cache (metrics, plots:
    git keeps them, so `dvc exp run` would commit them too)."""
    from dvc.repo import Repo

    with Repo(str(copy)) as repo:
        uncached = sorted({os.path.relpath(o.fs_path, copy) for s in repo.index.stages for o in s.outs if not o.use_cache})
    argv = ["dvc", "--cd", str(copy), "exp", "save", "--force", "-n", name]
    argv += [a for path in uncached if (copy / path).exists() for a in ("-I", path)]
    done = runner.run(argv, timeout=600)
    if done.returncode != 0:
        raise OrchestratorError(f"{name}: `dvc exp save` failed: {(done.stderr or done.stdout).strip()[-500:]}")


def _git(runner: Runner, root: Path, *args: str) -> str | None:
    try:
        done = runner.run(["git", "-C", str(root), *args], timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
