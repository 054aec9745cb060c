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

What the command line and the disk give is checked before it is acted on: a sweep NAME
(given to ``--record``, ``--next-wave``, ``status --sweep``) as when a sweep is made, the
``-S`` params FILE as a file of the project (never through ``..`` or a link out of it),
every point's values applied to a scratch copy of the params files before any copy of
the project is made, and a manifest read as a small regular file of the shape written
here. A sweep is submitted whole or not at all: a point whose items cannot be planned
stops the sweep, and the copies this run made are removed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from orchestrator.errors import ConfigError, OrchestratorError, PlanError, UnreadableFile
from orchestrator.jobs import backends, detached, record
from orchestrator.jobs.batch import Batch, ItemJob, stale, unplannable
from orchestrator.jobs.recorder import RecordingJob, submit_recorder
from orchestrator.jobs.waves import ended_since, followed
from orchestrator.scripts.workspace import Workspace
from orchestrator.util import files
from orchestrator.util.git import Git
from orchestrator.util.runner import Runner

SWEEPS_DIR = ".dvc/tmp/orchestrator-sweeps"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,80}")
_INDEX = re.compile(r"[0-9]{1,5}")
MAX_POINTS = 10_000  # a typo in a range() should not make a million git worktrees
# A manifest of MAX_POINTS points with their overrides is a few MiB; more is not one.
_MAX_MANIFEST_BYTES = 32 << 20
_MAX_PARAMS_BYTES = 4 << 20  # a params file is small; /dev/zero or a data file is not one
# A copy's own state: a params file there would rewrite its git link, DVC config or ledger.
_STATE_FOLDERS = (".git", ".dvc", ".orchestrator")
_SYNTAX_HINT = "DVC's syntax: -S 'lr=0.1,0.2', -S 'seed=range(0,3)', -S 'train.yaml:opt=choice(adam,sgd)'"


def check_name(name: str) -> str:
    """``name`` if it can name a sweep: its manifest's file, its copies' folder and its
    experiments. Every name is checked here, the ones read back as much as the new ones."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(
            f"sweep name {_shown(name)}: use letters, digits, '.', '_' and '-' (it names DVC experiments and files), "
            "starting with a letter or digit, at most 81 characters"
        )
    return name


def _shown(value: object, limit: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


@dataclass(frozen=True)
class SweepPoint:
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
    points: tuple[SweepPoint, ...]

    @staticmethod
    def path(root: Path, name: str) -> Path:
        return root / SWEEPS_DIR / f"{check_name(name)}.json"

    def save(self, root: Path) -> None:
        files.atomic_write(Sweep.path(root, self.name), json.dumps(asdict(self), indent=1), durable=True)

    @classmethod
    def load(cls, root: Path, name: str) -> Sweep:
        """Sweep ``name``'s manifest, or one error: no such sweep, or a damaged manifest."""
        path = Sweep.path(root, name)
        try:
            text = files.read_text(path, _MAX_MANIFEST_BYTES)
        except UnreadableFile as exc:
            if exc.missing:
                raise _unknown(path.parent, name) from None
            raise _damaged(name, path, [exc.reason]) from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise _damaged(name, path, [f"it is not JSON: {exc}"]) from None
        problems = _manifest_problems(data, name)
        if problems:
            raise _damaged(name, path, problems)
        points = tuple(SweepPoint(**p) for p in data["points"])
        return cls(data["name"], data["baseline"], tuple(data["sets"]), tuple(data["targets"]), points)


def _unknown(folder: Path, name: str) -> OrchestratorError:
    known = sorted(p.stem for p in folder.glob("*.json") if _NAME.fullmatch(p.stem)) if folder.is_dir() else []
    return OrchestratorError(f"no sweep named {name!r} in this project", hints=[f"sweeps here: {', '.join(known) or '(none)'}"])


def _damaged(name: str, path: Path, problems: Sequence[str]) -> OrchestratorError:
    return OrchestratorError(
        f"the manifest of sweep {name!r} ({path}) is damaged",
        problems,
        hints=["it is not what `orchestrator sweep` wrote: restore it, or move it aside and run the sweep's command again"],
    )


# The manifest's fields and their types, as Sweep.save writes them.
_SWEEP_FIELDS = {"name": str, "baseline": str, "sets": "strings", "targets": "strings", "points": list}
_POINT_FIELDS = {"name": str, "overrides": "overrides", "folder": str, "saved": bool}
_KIND_WORDS = {
    str: "a string",
    list: "a list",
    bool: "true or false",
    "strings": "a list of strings",
    "overrides": "an object of params files and lists of overrides",
}
_COMMIT = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")  # git's sha1 or sha256


def _manifest_problems(data: object, name: str) -> list[str]:
    """What makes ``data`` other than a manifest of sweep ``name``: its shape, and the
    names and folders its points would be recorded and removed by."""
    problems = _shape_problems(data, _SWEEP_FIELDS, "the manifest")
    if problems or not isinstance(data, dict):  # not a dict: a problem above
        return problems
    if data["name"] != name:
        problems.append(f"it names sweep {_shown(data['name'])}, not {name!r}")
    if not _COMMIT.fullmatch(data["baseline"]):
        problems.append(f"its baseline {_shown(data['baseline'])} is not a commit's hash")
    if len(data["points"]) > MAX_POINTS:
        problems.append(f"it lists {len(data['points']):,} points; a sweep has at most {MAX_POINTS:,}")
        return problems
    for i, point in enumerate(data["points"]):
        found = _shape_problems(point, _POINT_FIELDS, f"point {i}") or _point_problems(point, name, i)
        problems += found
        if len(problems) >= 10:  # enough to see what happened to the file
            break
    return problems


def _shape_problems(data: object, fields: dict[str, object], what: str) -> list[str]:
    if not isinstance(data, dict):
        return [f"{what} is {type(data).__name__}, not an object of {', '.join(fields)}"]
    problems = [f"{what} has no field {key!r}" for key in fields if key not in data]
    problems += [f"{what} has an unknown field {_shown(key)}" for key in data if key not in fields]
    for key, kind in fields.items():
        if key in data and not _is(data[key], kind):
            problems.append(f"{what}'s {key!r} is {_shown(data[key], 60)}, not {_KIND_WORDS[kind]}")
    return problems


def _is(value: object, kind: object) -> bool:
    if kind == "strings":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "overrides":
        return isinstance(value, dict) and all(isinstance(k, str) and _is(v, "strings") for k, v in value.items())
    return isinstance(kind, type) and isinstance(value, kind)


def _point_problems(point: dict, name: str, i: int) -> list[str]:
    """A point is named and placed as :func:`define` names and places it: its copy is
    submitted from, recorded and at last removed, so it must be that sweep's folder."""
    index = point["folder"].rpartition("/")[2]
    if not _INDEX.fullmatch(index) or point["folder"] != f"{SWEEPS_DIR}/{name}/{index}":
        return [f"point {i}'s folder {_shown(point['folder'])} is not a folder of this sweep ({SWEEPS_DIR}/{name}/N)"]
    if point["name"] != f"{name}-{index}":
        return [f"point {i}'s name {_shown(point['name'])} is not {name}-{index}"]
    bad = [f for f in point["overrides"] if _outside(f)]
    return [f"point {i}'s params file {_shown(bad[0])} is not a path inside the project"] if bad else []


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
            hints=[_SYNTAX_HINT],
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
    for given in dict.fromkeys(f for point in points for f in point):
        params_file(root, given)
    if name is None:
        name = "sweep-" + hashlib.sha256("\0".join([baseline, *sets, "", *targets]).encode()).hexdigest()[:8]
    check_name(name)
    width = len(str(len(points) - 1))
    made = tuple(
        SweepPoint(f"{name}-{i:0{width}d}", {f: list(o) for f, o in p.items()}, f"{SWEEPS_DIR}/{name}/{i:0{width}d}")
        for i, p in enumerate(points)
    )
    return Sweep(name, baseline, tuple(sets), tuple(targets), made)


def params_file(root: Path, given: str) -> Path:
    """Where the params file ``given`` with ``-S FILE:...`` is, relative to the project and
    with no symbolic link on the way: a file of the project's, outside its state folders.
    What it names is only ever written in the points' copies, never here."""
    what = f"-S {_shown(given)}:..."
    if _outside(given):
        raise ConfigError(
            f"{what}: a params file is a path inside the project, relative to it (not absolute, no '..' out of it)",
            hints=["e.g. -S 'params.yaml:lr=0.1,0.2' or -S 'conf/train.yaml:opt=adam,sgd'"],
        )
    real_root = root.resolve()
    real = Path(os.path.realpath(real_root / given))
    if real == real_root:
        raise ConfigError(f"{what}: that is the project's folder, not a params file")
    if not real.is_relative_to(real_root):
        raise ConfigError(f"{what}: the params file leads out of the project through a symbolic link")
    rel = real.relative_to(real_root)
    if rel.parts[0] in _STATE_FOLDERS:
        raise ConfigError(f"{what}: {rel} is in {rel.parts[0]}/, the project's own state, not a params file")
    return rel


def _outside(given: str) -> bool:
    """``given`` names no file inside a folder, whatever links the folder holds: empty,
    absolute, climbing out with '..', or with a NUL no system takes."""
    if not given or "\0" in given or os.path.isabs(given):
        return True
    norm = os.path.normpath(given)
    return norm == ".." or norm.startswith("../")


def point_params(root: Path, points: Sequence[SweepPoint]) -> dict[str, dict[Path, bytes]]:
    """Each point's params files with its values applied (by DVC, as `dvc exp run -S` does),
    by the file's place in the project: worked out in a scratch folder, so a value that
    cannot be applied (a param that does not exist, a value of the wrong kind) stops the
    sweep before anything is made."""
    where = {f: params_file(root, f) for f in dict.fromkeys(f for p in points for f in p.overrides)}
    base = {rel: _read_params(root, given, rel) for given, rel in where.items()}
    made: dict[str, dict[Path, bytes]] = {}
    failed: dict[str, list[str]] = {}  # what is wrong -> the points it is wrong for
    with tempfile.TemporaryDirectory(prefix="orchestrator-sweep-") as scratch:
        for point in points:
            try:
                made[point.name] = _applied(Path(scratch), point, where, base)
            except ConfigError as exc:
                failed.setdefault(exc.headline, []).append(point.name)
    if failed:
        raise ConfigError(
            f"the sweep's values cannot be applied to {sum(map(len, failed.values()))} of its {len(points)} points; nothing was made",
            [f"{names[0]}{f' (and {len(names) - 1} more)' if len(names) > 1 else ''}: {why}" for why, names in failed.items()],
            hints=["a param the file does not have is added with a leading '+': -S '+train.dropout=0.1,0.2'", _SYNTAX_HINT],
        )
    return made


def _read_params(root: Path, given: str, rel: Path) -> bytes:
    try:
        return files.read_regular(root.resolve() / rel, _MAX_PARAMS_BYTES)
    except UnreadableFile as exc:
        raise ConfigError(f"-S {_shown(given)}:...: the params file {rel} {exc.reason}") from None


def _applied(scratch: Path, point: SweepPoint, where: dict[str, Path], base: dict[Path, bytes]) -> dict[Path, bytes]:
    from dvc.utils.hydra import apply_overrides

    texts: dict[Path, bytes] = {}
    for given, overrides in point.overrides.items():
        rel = where[given]
        work = scratch / f"params{rel.suffix}"  # DVC reads and writes a file by its suffix
        work.write_bytes(texts.get(rel, base[rel]))
        try:
            apply_overrides(str(work), overrides)
        except Exception as exc:  # DVC raises its own, Hydra's and the file format's errors, of several kinds
            raise ConfigError(f"{given}: {_reason(exc)}") from None
        texts[rel] = work.read_bytes()
    return texts


def _reason(exc: BaseException) -> str:
    """The first line of what went wrong, from DVC's error or the one it wraps."""
    for err in (exc.__cause__, exc):
        if err is not None and str(err).strip():
            return str(err).strip().splitlines()[0]
    return type(exc).__name__


def submit(
    root: Path,
    cluster: str | None,
    runner: Runner,
    sets: Sequence[str],
    targets: Sequence[str] = (),
    name: str | None = None,
    say: Callable[[str], None] = print,
    now: Callable[[], float] | None = None,
) -> tuple[Sweep, dict[str, list[ItemJob]], ItemJob | None]:
    """Make the sweep's copies, submit every point's stale items, then its recording job.

    The same command again (a point failed, the login node went away mid-way) submits
    only what has no job yet: each copy has its own ledger, and saved points are skipped."""
    import time

    now = now or time.time
    root = root.resolve()  # the copies are opened from inside themselves: a relative root would not name them
    # Once, before any copy is made: the points are HEAD's params.yaml with -S, so a cluster whose
    # values it does not hold would run the base's matrix in every point (each copy checks its own too).
    from orchestrator.config import params as params_file

    params_file.require_switched(params_file.load(root), Workspace.open(root, cluster, runner, form="sbatch").cluster, "submitted")
    sweep = define(root, runner, sets, targets, name)
    earlier = Sweep.path(root, sweep.name).exists()
    if earlier:
        found = Sweep.load(root, sweep.name)
        if found.baseline != sweep.baseline or found.sets != sweep.sets:
            raise OrchestratorError(f"sweep {sweep.name!r} exists with other params or from another commit", hints=["pick another --name"])
        sweep = found
    todo = [p for p in sweep.points if not p.saved]
    params = point_params(root, todo)
    sweep.save(root)
    made: list[Path] = []
    try:
        batches = _plan(root, cluster, runner, sweep, todo, params, made)
    except Exception:
        _abandon(root, runner, sweep, made, manifest=not earlier)
        raise
    ws = Workspace.open(root, cluster, runner, form="sbatch")
    backend = backends.SbatchBackend(root, runner, ws.profile.profile.scheduler.cluster_name)
    jobs, recorder = _queue(ws, backend, cluster, runner, sweep, todo, batches, now(), None, say)
    return sweep, jobs, recorder


def _plan(
    root: Path,
    cluster: str | None,
    runner: Runner,
    sweep: Sweep,
    todo: list[SweepPoint],
    params: dict[str, dict[Path, bytes]],
    made: list[Path],
) -> list[Batch]:
    """Every point's copy (``made`` gets those made now) and its stale items, planned; one
    PlanError naming each point that cannot be submitted, and why."""
    cache = _cache_dir(root)
    batches, problems = [], []
    for point in todo:
        try:
            copy = _copy(root, runner, sweep, point, cache, params[point.name], made)
            batch = stale(copy, cluster, runner, sweep.targets, label=point.name)
            problems += [f"{point.name}: {who}: {why}" for who, why in unplannable(batch.ws, sweep.targets)]
        except OrchestratorError as exc:
            problems.append(f"{point.name}: {'; '.join([exc.headline, *exc.problems])}")
            continue
        batches.append(batch)
    if problems:
        raise PlanError(f"sweep {sweep.name}: its points cannot all be submitted; nothing was submitted", problems)
    return batches


def _abandon(root: Path, runner: Runner, sweep: Sweep, made: list[Path], manifest: bool) -> None:
    """Undo what a refused sweep made: the copies made for it now, its manifest if new."""
    for copy in made:
        _git(runner, root, "worktree", "remove", "--force", str(copy))
    if manifest:
        Sweep.path(root, sweep.name).unlink(missing_ok=True)
    for folder in (root / SWEEPS_DIR / sweep.name, root / SWEEPS_DIR):
        with contextlib.suppress(OSError):  # left where something else is in it
            folder.rmdir()


def next_wave(
    root: Path, cluster: str | None, runner: Runner, name: str, since: float, say: Callable[[str], None] = print, now=None
) -> tuple[dict[str, list[ItemJob]], ItemJob | None] | None:
    """The recording job's, where the site's MaxSubmitJobs cut sweep ``name`` into waves
    (the first submitted at ``since``): submit the next wave of its unsaved points' items,
    leaving out those with a job since then; None when no item is left to submit."""
    import time

    now = now or time.time
    root = root.resolve()
    sweep = Sweep.load(root, name)
    todo = [p for p in sweep.points if not p.saved and (root / p.folder).is_dir()]
    batches = [stale(root / p.folder, cluster, runner, sweep.targets, label=p.name) for p in todo]
    ws = Workspace.open(root, cluster, runner, form="sbatch")
    backend = backends.SbatchBackend(root, runner, ws.profile.profile.scheduler.cluster_name)
    batches = ended_since(batches, backend, since, say)
    if all(followed(b) for b in batches):
        say(f"every item of sweep {name} has had its job: no further wave")
        return None
    return _queue(ws, backend, cluster, runner, sweep, todo, batches, now(), since, say)


def _queue(
    ws: Workspace,
    backend: backends.SbatchBackend,
    cluster: str | None,
    runner: Runner,
    sweep: Sweep,
    todo: list[SweepPoint],
    batches: list,
    at: float,
    since: float | None,
    say,
) -> tuple[dict[str, list[ItemJob]], ItemJob | None]:
    """Queue the points' items (those of one shape share arrays across the points), in waves
    where MaxSubmitJobs is short of room, then the sweep's recording job."""
    rows = detached.queue(batches, runner, at, say, waves=True)
    jobs = {p.name: js for p, js in zip(todo, rows, strict=True)}
    active = list(dict.fromkeys(j.job_id.split("_")[0] for js in jobs.values() for j in js if j.state.active and not j.deferred))
    where = ["--cluster", cluster] if cluster else []
    waits = any(j.deferred for js in jobs.values() for j in js)
    following = ["orchestrator", "sweep", "--name", sweep.name, *where, "--next-wave", repr(at if since is None else since)]
    job = RecordingJob(
        f"orchestrator:sweep:{sweep.name}",
        ["orchestrator", "sweep", "--record", sweep.name, *where, "--recording-job"],
        script=f"sweep-{sweep.name}.sbatch",
        manual=("orchestrator", "sweep", "--record", sweep.name, *where),
        next_wave=following if waits else None,
        waiting=sum(j.deferred for js in jobs.values() for j in js),
    )
    recorder = submit_recorder(ws, backend, job, active, lambda: at, say)
    return jobs, recorder


@dataclass
class SweepRecorded:
    saved: list[str] = field(default_factory=list)  # experiment names
    unfinished: list[tuple[str, str]] = field(default_factory=list)  # (experiment, why)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (experiment, the item, job and log)
    # Those of ``failed`` that the recording itself failed (its copy gone, DVC's record or save
    # refused), not an item's job: only these fail the sweep's recording job.
    errors: list[str] = field(default_factory=list)


def record_points(root: Path, cluster: str | None, runner: Runner, name: str, say: Callable[[str], None] = print) -> SweepRecorded:
    """Record every point whose items all succeeded and save it as a DVC experiment."""
    root = root.resolve()
    sweep = Sweep.load(root, name)
    found = SweepRecorded()
    points = list(sweep.points)
    for i, point in enumerate(points):
        if point.saved:
            found.saved.append(point.name)
            continue
        copy = root / point.folder
        if not copy.is_dir():
            found.failed.append((point.name, f"its copy {point.folder} is gone: run the sweep again"))
            found.errors.append(point.name)
            continue
        try:
            result = record.record(copy, cluster, runner, sweep.targets, say=lambda line: None)
        except OrchestratorError as exc:  # one point's trouble (its copy damaged by hand, say) stops no other
            found.failed.append((point.name, exc.headline))
            found.errors.append(point.name)
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
            found.errors.append(point.name)
            continue
        points[i] = SweepPoint(point.name, point.overrides, point.folder, saved=True)
        Sweep(sweep.name, sweep.baseline, sweep.sets, sweep.targets, tuple(points)).save(root)
        _git(runner, root, "worktree", "remove", "--force", str(copy))
        found.saved.append(point.name)
        say(f"{point.name}: saved as a DVC experiment")
    return found


def _copy(root: Path, runner: Runner, sweep: Sweep, point: SweepPoint, cache: Path, params: dict[Path, bytes], made: list[Path]) -> Path:
    """The point's copy of the project at the sweep's baseline (made once, added to ``made``),
    its params applied: written again each time, so a copy that a run stopped half-way is
    never submitted without its values."""
    copy = root / point.folder
    if not (copy / ".git").exists():
        copy.parent.mkdir(parents=True, exist_ok=True)
        done = Git(root, runner).run("worktree", "add", "--force", "--detach", str(copy), sweep.baseline, timeout=120)
        if done.returncode != 0:
            raise OrchestratorError(f"git cannot make its copy of the project: {done.stderr.strip()}")
        made.append(copy)
    # One DVC cache for the project and its copies: a saved experiment's outputs are where `dvc exp apply` looks.
    files.write_if_changed(copy / ".dvc/config.local", f"[cache]\n    dir = {cache}\n")
    real = copy.resolve()
    for rel, data in params.items():
        if not (copy / rel).parent.resolve().is_relative_to(real):  # a link in the commit, to outside the copy
            raise OrchestratorError(f"{rel} leads out of the point's copy through a symbolic link")
        files.write_if_changed(copy / rel, data)
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
    out = Git(root, runner).output(*args, timeout=120)
    return None if out is None else out.strip()
