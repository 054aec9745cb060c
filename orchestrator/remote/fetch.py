"""Results back from the cluster: the finished items' outputs and dvc.lock entries, verified by hash.

``orchestrator fetch [TARGETS...]`` over the session's ssh master (:mod:`connection`). What
comes from the cluster is data (:mod:`trust`: anyone who can write its project folder wrote it):

1. read the cluster's ``dvc.lock`` (``head -c`` there, under a size cap) as plain YAML, no
   anchors or aliases, and pick its stages: the TARGETS (a stage name, ``name@item``, or a
   matrix/foreach name for all its items), else every stage the lock has there. A target
   this project's dvc.yaml knows but the cluster's lock lacks is skipped as not finished
   there; one neither knows is an error.
2. check each stage's entry before a byte moves: every out it names is an out this side's
   dvc.yaml declares for that stage, never under ``.git/``, ``.dvc/``, ``.orchestrator/``
   nor one of the pipeline's own files (dvc.yaml, dvc.lock, params files, .gitignore ...),
   with a DVC md5; its cmd, deps and params are what DVC's lock schema allows, as plain
   data. Anything else and the stage is refused (exit 1), nothing of it fetched.
3. bring each stage's outs into a staging folder, ``.orchestrator/fetch/``, so nothing in
   the workspace changes while bytes are on the way. Where the project's committed DVC
   config names a default remote, cached outs come through it (:mod:`shared`: pushed
   there by the cluster, exactly the objects of the lock entries pulled here); the outs
   this side's dvc.yaml marks ``cache: false`` (metrics, plots, provenance.json), or every
   out without such a remote, come with ``rsync`` over the session's master: regular
   files and folders only, no mode kept. The output says which way each came.
4. hash what arrived the way DVC does (dvc_data's ``build``: the file's md5, a folder's
   ``.dir`` listing hash) and compare with the cluster's lock entry, after each file got
   the mode the user's umask gives a new one. A stage is taken whole or not at all: one
   out holding a link, FIFO, device or socket, or a name never placed, and the stage is
   refused (exit 1); one out missing there or not matching its entry (a later run of the
   item removed or rewrote it: running, cancelled or failed) and it is skipped, said so.
   Either way its files are not placed and its entry not written, so this side's dvc.lock
   never claims files it does not have.
5. move the verified outs into place, put the cached ones into this side's DVC cache
   (``dvc status`` calls an out whose object is missing "not in cache"; a ``cache: false``
   out has none, as after ``dvc repro``) and into the .gitignore beside them (DVC's own
   Output.ignore, as ``dvc repro`` does), and merge the entries into the local
   ``dvc.lock`` stage by stage (the checked entry replaces this side's for the fetched
   stages only; the others stay), re-dumped from plain data to a temporary file and
   renamed, with the mode the old file had.

Then ``dvc metrics show``, ``dvc plots show`` and ``orchestrator report`` read them here.

The cluster's side needs ``rsync`` on the non-login shell's PATH (rsync starts its server
with a plain ``ssh HOST rsync --server``; login.setup does not apply).
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
import shutil
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from orchestrator.pipeline import dvcfiles
from orchestrator.remote import trust
from orchestrator.remote.checkout import LOCK_NAME
from orchestrator.remote.shared import Puller, default_remote
from orchestrator.remote.trust import Declared, FetchRefused, Out, shown
from orchestrator.util import files, yamlio
from orchestrator.util.runner import Completed, Runner
from orchestrator.util.ssh import RemoteError

STAGING = ".orchestrator/fetch"

__all__ = ["Declared", "FetchError", "Out", "FetchRefused", "FetchResult", "fetch", "merge", "rsync_copier", "select"]


class FetchError(RemoteError):
    """Nothing to fetch, or a target nobody knows: nothing was changed here."""


@dataclass
class FetchResult:
    """What became of one stage."""

    stage: str
    fetched: bool
    size: int = 0
    files: int = 0
    why: str = ""  # why it was skipped
    problems: list[str] = field(default_factory=list)  # why it was skipped, out by out
    routes: dict[str, str] = field(default_factory=dict)  # out -> the way it came: "rsync" or "DVC remote 'NAME'"
    notes: list[str] = field(default_factory=list)  # fetched, but worth saying
    refused: bool = False  # what the cluster sent was not taken (a hash, a path, a file): the exit status says so
    entry: dict = field(default_factory=dict)  # fetched: the checked lock entry to merge


def parse_lock(text: str, where: str) -> dict:
    """The cluster's lock's stages, read as plain data (:func:`trust.load_lock`)."""
    return trust.lock_stages(trust.load_lock(text, where), where)


def select(stages: dict, targets: Sequence[str], known: Iterable[str]) -> tuple[list[str], list[FetchResult]]:
    """The lock's stages to fetch and the targets skipped (not finished there).

    ``known``: the stage names this project's dvc.yaml defines (``name`` of a matrix or
    foreach, whose items are ``name@...``). A target neither side knows: :class:`FetchError`."""
    if not targets:
        return list(stages), []
    known = set(known)
    chosen: list[str] = []
    skipped: list[FetchResult] = []
    unknown: list[str] = []
    for target in targets:
        hits = [name for name in stages if name == target or name.split("@", 1)[0] == target]
        if hits:
            chosen += [name for name in hits if name not in chosen]
        elif target in known or target.split("@", 1)[0] in known:
            skipped.append(FetchResult(target, False, why="not finished there (the cluster's dvc.lock has no entry for it)"))
        else:
            unknown.append(target)
    if unknown:
        names = sorted({*known, *(name.split("@", 1)[0] for name in stages)})
        raise FetchError(
            f"unknown target(s): {shown(', '.join(unknown))}: neither this project's dvc.yaml nor the cluster's dvc.lock has such a stage",
            hints=[f"stages: {shown(', '.join(names)) or '(none)'}", "a matrix item is NAME@ITEM; NAME alone takes all its items"],
        )
    return chosen, skipped


def read_local_lock(project: Path) -> str | None:
    """This side's dvc.lock (None: there is none), a regular file under the size cap, or :class:`FetchError`."""
    path = project / LOCK_NAME
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        raise FetchError(f"{path} is not a regular file: fetch merges into a dvc.lock it can rewrite, nothing fetched")
    if info.st_size > trust.MAX_LOCK_BYTES:
        raise FetchError(f"{path} is over {trust.MAX_LOCK_BYTES // 2**20} MiB: nothing fetched")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FetchError(f"cannot read {path}: {exc}") from None


def merge(local: str | None, entries: dict[str, dict], where: str = "dvc.lock here") -> str:
    """This side's dvc.lock with ``entries`` (stage -> its checked entry) put in: fetched stages
    take the new entry, every other stage stays as it is here. Re-dumped from plain data."""
    try:
        document = trust.load_lock(local, where) if local else None
        stages = trust.lock_stages(document, where)
    except FetchRefused as exc:
        raise FetchError(f"{exc.headline}; fix or remove it, then fetch again") from None
    document = dict(document) if isinstance(document, dict) else {"schema": "2.0"}
    document["stages"] = {**stages, **entries}
    return yamlio.dump(document)


def write_atomic(path: Path, text: str) -> None:
    """``text`` into ``path`` in one rename, with the mode the old file had (a new one: what the
    umask gives), not atomic_write's default."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~files.umask()
    files.atomic_write(path, text, mode=mode)


class Hasher:
    """DVC's hash of a file or folder (dvc_data's ``build``), and its objects put into this project's cache."""

    def __init__(self, project: Path) -> None:
        from dvc.repo import Repo
        from dvc_objects.fs.local import LocalFileSystem

        self.repo = Repo(str(project))
        self.odb = self.repo.cache.local
        self.fs = LocalFileSystem()
        self._built: dict[str, tuple] = {}
        self._stages: dict[str, object] | None = None

    def hash(self, path: Path, name: str) -> tuple[str, dict]:
        """The hash of ``path`` and the size (and a folder's file count) DVC writes beside it."""
        from dvc_data.hashfile.build import build

        staging, meta, obj = build(self.odb, str(path), self.fs, name)
        self._built[str(path)] = (staging, obj)
        sizes = {"size": meta.size} if meta.size is not None else {}
        assert obj.hash_info.value is not None  # build() hashes what it builds (its type allows none)
        return obj.hash_info.value, sizes | ({"nfiles": meta.nfiles} if meta.nfiles is not None else {})

    def cache(self, path: Path, keep: bool = True) -> None:
        """Copy the objects of ``path`` (hashed before, from where it lies now) into the cache; ``keep``
        False: forget them instead (a ``cache: false`` out)."""
        from dvc_data.hashfile.transfer import transfer

        staging, obj = self._built.pop(str(path))
        if keep:
            transfer(staging, self.odb, {obj.hash_info}, hardlink=False, shallow=False)

    def _resolved(self) -> dict:
        if self._stages is None:
            # Every stage of the project's dvc.yaml resolved in one pass: asked one name at a time,
            # DVC parses dvc.yaml and dvc.lock again for each, which for a 1,000-item matrix is a
            # thousand parses of a thousand-entry lock.
            from dvc.exceptions import DvcException

            top = os.path.join(self.repo.root_dir, "dvc.yaml")
            try:
                found = self.repo.index.stages
            except DvcException as exc:  # e.g. an out DVC itself refuses (inside .git, a .dvc file)
                raise FetchError(f"DVC cannot read this project's dvc.yaml: {exc}: nothing fetched") from None
            self._stages = {s.name: s for s in found if getattr(s, "dvcfile", None) and os.path.abspath(s.dvcfile.path) == top}
        return self._stages

    def declared(self, name: str) -> dict[str, Declared] | None:
        """This side's dvc.yaml's outs of stage ``name`` (``name@item`` resolved), by normalized path; None: no such stage here."""
        stage = self._resolved().get(name)
        if stage is None:
            return None
        return {posixpath.normpath(str(out.def_path)): Declared(str(out.def_path), bool(out.use_cache)) for out in stage.outs}

    def own_files(self) -> frozenset[str]:
        """The params files the project's stages read (params.yaml and any other): the pipeline's own, never placed."""
        from dvc.dependency.param import ParamsDependency

        found = {
            posixpath.normpath(str(dep.def_path))
            for stage in self._resolved().values()
            for dep in stage.deps
            if isinstance(dep, ParamsDependency)
        }
        return frozenset(found)

    def ignore(self, name: str) -> list[str]:
        """Stage ``name``'s cached outs into the .gitignore beside them, as ``dvc repro`` does (DVC's
        own Output.ignore: the scm's ignore file, one entry per out, none twice). What could not be: notes."""
        from dvc.exceptions import DvcException

        notes = []
        stage = self._resolved().get(name)
        for out in stage.outs if stage is not None else ():
            try:
                out.ignore()
            except DvcException as exc:  # e.g. the path is tracked by git here: DVC would refuse the same way
                notes.append(f"{out.def_path}: not added to .gitignore: {exc}")
        return notes

    def close(self) -> None:
        self.repo.close()


# Copy: the outs' paths (relative to the cluster's project folder) into a local folder, each
# at its relative path; returns the copier's result (rsync's exit 23: something missing).
Copier = Callable[[Sequence[str], Path], Completed]


def rsync_copier(ssh_base: Sequence[str], host: str, project: str, runner: Runner) -> Copier:
    def copy(paths: Sequence[str], into: Path) -> Completed:
        # One rsync for every path, whatever their number (a 1,000-item sweep's outs): the list
        # goes over rsync's own protocol (--files-from, NUL-separated), not on a command line.
        # --files-from implies --relative (each path lands at its relative path under `into`); -r
        # brings the folders' contents. Only regular files and folders come (no -l, no -D: a link,
        # FIFO or device there is skipped and named), with no mode, owner or group kept (no -p, -o,
        # -g: --chmod is taken as the sender's mode, which the umask then masks, as for a new file).
        listing = into.parent / f".{into.name}.files"
        listing.write_bytes(b"".join(path.encode() + b"\0" for path in paths))
        try:
            argv = ["rsync", "-rt", "--chmod=D0777,F0666", "--partial", "-s", "-e", shlex.join(ssh_base)]
            argv += ["--from0", f"--files-from={listing}", f"{host}:{PurePosixPath(project)}/", f"{into}/"]
            return runner.run(argv, timeout=None)
        finally:
            listing.unlink(missing_ok=True)

    return copy


# rsync's word for what it did not copy without -l/-D (a link, FIFO, device or socket there).
_SKIPPED = re.compile(r'^skipping non-regular file "(.*)"$', re.MULTILINE)

# Push: ``dvc push`` of these stages' cached outs to the DVC remote named, run on the cluster.
Pusher = Callable[[str, Sequence[str]], Completed]
RSYNC = "rsync"


def fetch(
    project: Path,
    lock_text: str,
    where: str,
    targets: Sequence[str],
    known: Iterable[str],
    copy: Copier,
    say: Callable[[str], None],
    push: Pusher | None = None,
) -> list[FetchResult]:
    """Fetch the chosen stages of the cluster's lock ``lock_text`` into ``project`` (see the module's
    docstring). ``push``: how to push there, for a DVC remote both sides share; None: rsync only."""
    if problem := dvcfiles.surely_cut(lock_text):
        raise FetchError(
            f"the cluster's dvc.lock at {where} was cut short by a DVC process killed while it wrote it ({problem}): nothing fetched",
            hints=["`orchestrator record --remote` puts back its last readable copy there and records what finished since"],
        )
    dvcfiles.require_readable(project)
    stages = parse_lock(lock_text, where)
    if not stages and not targets:
        raise FetchError(f"the cluster's dvc.lock at {where} has no stages: nothing has finished there yet")
    chosen, results = select(stages, targets, known)
    merge(read_local_lock(project), {})  # this side's lock is one fetch can merge into, before DVC reads it or anything moves
    staging_root = project / STAGING
    staging_root.mkdir(parents=True, exist_ok=True)
    hasher = Hasher(project)
    entries: dict[str, dict] = {}
    for result in results:
        say(describe(result))
    try:
        own = hasher.own_files()
        plans = {name: _plan(name, stages[name], hasher, own) for name in chosen}
        puller = _shared(hasher, plans, staging_root, push, say)
        staged = staging_root / "rsync"
        staged.mkdir()
        wanted = [out.path for plan in plans.values() if isinstance(plan, FetchPlan) for out in _by_rsync(plan, puller)]
        if wanted:
            say(f"copying {len(wanted)} output(s) of {len(plans)} stage(s) from the cluster")
        done = copy(wanted, staged) if wanted else None
        for name in chosen:
            plan = plans[name]
            result = plan if isinstance(plan, FetchResult) else _fetch_stage(project, name, plan, staged, hasher, done, puller)
            results.append(result)
            say(describe(result))
            if result.fetched:
                entries[name] = result.entry
    finally:
        # Also when stopped half-way (Ctrl-C, a failed copy): the stages placed by then are whole
        # and verified, so their entries are written, and a second fetch starts where this one ended.
        try:
            if entries:
                write_atomic(project / LOCK_NAME, merge(read_local_lock(project), entries))
        finally:
            hasher.close()
            shutil.rmtree(staging_root, ignore_errors=True)
    return results


# What a later run of an item does to the files its dvc.lock entry records: DVC removes them when
# the run starts, the run rewrites them, and a run cancelled or failed leaves them so. Nothing
# of such a stage is placed (the entry describes other files), but it is no refusal: it is the
# loop's ordinary state while a run of the item goes on or after one was cancelled.
LATER_RUN = (
    "its files there are not those its dvc.lock entry records: a later run of it removed or rewrote them "
    "(running, cancelled or failed: `orchestrator status --remote` says which); fetch takes it once a run of it finishes"
)


@dataclass(frozen=True)
class FetchPlan:
    """One stage's outs, each a declared out here (cached or not: ``cache: false``), and the
    entry's other fields (cmd, deps, params) as checked plain data."""

    outs: list[Out]
    fields: dict


def _plan(name: str, entry: Any, hasher: Hasher, own: frozenset[str]) -> FetchPlan | FetchResult:
    """What to fetch of stage ``name``, its entry checked before any byte moves; a refused stage: its FetchResult."""
    if hasher.declared(name) is None:  # an item that left the matrix since (or never was one here): nothing of it placed
        return FetchResult(name, False, why="not a stage of this project's dvc.yaml (an item that left the matrix?): not fetched")
    try:
        outs = trust.verify_outs(name, entry, hasher.declared(name), own)
        if not outs:
            return FetchResult(name, False, why="its entry there has no outs")
        fields = trust.entry_fields(name, entry)
    except FetchRefused as exc:
        return FetchResult(name, False, why=exc.headline.removeprefix(f"{shown(name)}: "), refused=True)
    return FetchPlan(outs, fields)


def _shared(hasher: Hasher, plans: dict, staging_root: Path, push: Pusher | None, say: Callable[[str], None]) -> Puller | None:
    """Where the committed DVC config names a default remote: the wanted stages' cached outs pushed
    there by the cluster, and their objects pulled from it into a store of the staging folder."""
    remote = default_remote(hasher.repo) if push is not None else None
    wanted = {name: plan for name, plan in plans.items() if isinstance(plan, FetchPlan) and any(o.cached for o in plan.outs)}
    if remote is None or not wanted or push is None:
        return None
    say(f"pushing {len(wanted)} stage(s)' cached outs to the DVC remote {remote!r} on the cluster")
    done = push(remote, list(wanted))
    if done.returncode != 0:  # what did go is used; a stage missing objects is refused below, object by object
        lines = [line for line in (done.stderr.strip() or done.stdout.strip()).splitlines() if line.strip()]
        say(f"dvc push on the cluster did not finish cleanly (exit {done.returncode}): {shown(lines[-1]) if lines else 'no message'}")
    puller = Puller(hasher.repo, remote, staging_root / "objects")
    puller.pull((out.hash_name, out.md5) for plan in wanted.values() for out in plan.outs if out.cached)
    return puller


def _by_rsync(plan: FetchPlan, puller: Puller | None) -> list[Out]:
    """The outs of ``plan`` that come by rsync: all but the cached ones, where a shared remote is used."""
    return [out for out in plan.outs if not (puller is not None and out.cached)]


def _skipped(done: Completed | None, out: Out) -> list[str]:
    """What rsync did not copy of ``out`` for not being a regular file or folder there."""
    if done is None:
        return []
    named = _SKIPPED.findall(f"{done.stdout}\n{done.stderr}")
    return [path for path in named if path == out.path or path.startswith(f"{out.path}/")]


def _fetch_stage(
    project: Path, name: str, plan: FetchPlan, staged: Path, hasher: Hasher, done: Completed | None, puller: Puller | None
) -> FetchResult:
    """Verify stage ``name``'s outs (in ``staged`` where rsync put them, ``done`` its result; laid out
    there from ``puller``'s objects) and move them into place; the stage whole or not at all."""
    outs = plan.outs
    by_rsync = _by_rsync(plan, puller)
    shared = [out for out in outs if out not in by_rsync]
    done = done if by_rsync else None
    try:
        problems, stale, meta = _check(plan, staged, hasher, done, puller, shared)
        # rsync exit 23 or 24: some files were missing there (said above); anything else: the copy itself failed
        if (problems or stale) and done is not None and done.returncode not in (0, 23, 24):
            raise RemoteError(
                f"rsync from the cluster failed (exit {done.returncode}) while fetching {name}",
                done.stderr.strip().splitlines()[-6:],
                ["the cluster needs rsync on the PATH of a plain `ssh HOST` (no login shell)"],
            )
        if problems:
            return FetchResult(name, False, why="not taken, its dvc.lock entry not written", problems=problems + stale, refused=True)
        if stale:
            return FetchResult(name, False, why=LATER_RUN, problems=stale)
        size, files = _place(project, outs, staged, hasher)
        notes = hasher.ignore(name)
        routes = {out.path: (f"DVC remote {puller.name!r}" if puller is not None and out in shared else RSYNC) for out in outs}
        entry = {**plan.fields, "outs": [_out_entry(out, meta[out.path]) for out in outs]}
        return FetchResult(name, True, size=size, files=files, routes=routes, notes=notes, entry=entry)
    finally:
        for out in outs:  # what was not taken: gone, so a refused stage leaves nothing behind
            _remove(staged / out.path)


def _check(
    plan: FetchPlan, staged: Path, hasher: Hasher, done: Completed | None, puller: Puller | None, shared: list[Out]
) -> tuple[list[str], list[str], dict[str, dict]]:
    """What is wrong with the staged outs of ``plan`` (nothing: they may be placed): what the cluster
    must not send (links, devices...), what a later run there changed (see LATER_RUN); and each
    out's size fields."""
    problems: list[str] = []
    stale: list[str] = []
    meta: dict[str, dict] = {}
    mask = files.umask()
    for out in plan.outs:
        local = staged / out.path
        if puller is not None and out in shared and not puller.lay_out(out.hash_name, out.md5, local):
            problems.append(f"{out.path}: not whole in the DVC remote {puller.name!r} (not pushed there, or an object of it corrupt)")
            continue
        special = [f"{shown(path)}: not a regular file or folder there (a link, FIFO, device or socket)" for path in _skipped(done, out)]
        if special:
            problems += special
            continue
        if not local.exists() and not local.is_symlink():
            stale.append(f"{out.path}: missing there")
            continue
        found = trust.tree_problems(local, out.path)
        if found:
            problems += found
            continue
        trust.set_modes(local, mask)
        got, meta[out.path] = hasher.hash(local, out.hash_name)
        if got != out.md5:
            said = f"dvc.lock there says {out.md5}, the copy hashes to {got}"
            stale.append(f"{out.path}: hash mismatch: {said}")
    return problems, stale, meta


def _place(project: Path, outs: list[Out], staged: Path, hasher: Hasher) -> tuple[int, int]:
    """The verified outs into the workspace (their objects into the cache first); their bytes and file count."""
    size = files = 0
    for out in outs:
        src, dst = staged / out.path, project / out.path
        hasher.cache(src, keep=out.cached)  # a cache: false out is no DVC object: `dvc status` does not look for one
        bytes_, count = _size(src)
        size, files = size + bytes_, files + count
        _replace(src, dst)
    return size, files


def _out_entry(out: Out, meta: dict) -> dict:
    """The lock entry of a verified out: its path as dvc.yaml writes it, the hash it was checked
    against, the size this side counted; nothing else of the cluster's entry."""
    return {"path": out.declared, **({"hash": "md5"} if out.hash_name == "md5" else {}), "md5": out.md5, **meta}


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _size(path: Path) -> tuple[int, int]:
    if path.is_file():
        return path.stat().st_size, 1
    found = [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in found), len(found)


def _replace(src: Path, dst: Path) -> None:
    """``src`` to ``dst``, what was there before removed only once the new one is in place."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.is_dir() and not dst.is_symlink():
        old = dst.with_name(f".{dst.name}.fetch-old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(dst, old)
        os.replace(src, dst)
        shutil.rmtree(old, ignore_errors=True)
    else:
        if src.is_dir() and (dst.exists() or dst.is_symlink()):  # a file (or link) where a folder comes
            dst.unlink()
        os.replace(src, dst)


def describe(result: FetchResult) -> str:
    if result.fetched:
        ways: dict[str, list[str]] = {}
        for path, way in result.routes.items():
            ways.setdefault(way, []).append(path)
        how = "; ".join(f"{', '.join(paths)} " + _way(way) for way, paths in ways.items())
        if len(ways) == 1:
            how = _way(next(iter(ways)))
        lines = [f"fetched {result.stage}: {result.files} file(s), {_human(result.size)}" + (f" ({how})" if how else "")]
        return "\n".join([*lines, *(f"  {note}" for note in result.notes)])
    verb = "refused" if result.refused else "skipped"
    lines = [f"{verb} {shown(result.stage)}: {result.why}", *(f"  {p}" for p in result.problems)]
    return "\n".join(lines)


def _way(way: str) -> str:
    return f"by {way}" if way == RSYNC else f"through the {way}"


def _human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"
