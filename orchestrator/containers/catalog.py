"""The images a project has: which of containers/images.yaml are built, in what state,
where they were pushed; and what ``container clean`` would remove.

:func:`entries` answers ``orchestrator container list``: for each image of images.yaml,
whether its SIF is in the images folder, its content hash and the SIF's own sha256 (both
from the stamp :mod:`~orchestrator.containers.build` writes), size and age, whether it is
up to date (the same check ``container build`` makes before it decides to build: the
content hash of the inputs now against the stamp's), and the push record
``<sif>.pushes.json`` that a push leaves beside the image.

:func:`clean_plan` answers ``orchestrator container clean``: what in the images folder
belongs to no image of images.yaml any more (an old image with its stamp, log, push record
and lock; a stamp, log or push record whose image is gone; the hidden temporary file of a
build or write that was stopped) plus the build leftovers
:mod:`~orchestrator.containers.leftovers` finds. A file of an image whose build holds its
lock right now is left alone: a first build's log has no image beside it yet.

Reads files only; runs nothing. The clock is a parameter.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict

from orchestrator.containers import identity, images, leftovers
from orchestrator.containers.build import IMAGES_DIR, DigestMemo, freshness, read_stamp
from orchestrator.containers.identity import PUSHES_SUFFIX
from orchestrator.containers.images import IMAGES_FILE, ContainerError
from orchestrator.containers.inputs import BIG_FILE, Input, prepare

SIF = ".sif"
State = Literal["up to date", "stale", "not built", "invalid"]


def images_folder(project: Path) -> Path:
    return project / IMAGES_DIR


def require_images_file(project: Path) -> list[str]:
    """The image names of images.yaml; one clear error in a project without it."""
    path = project / IMAGES_FILE
    if not path.is_file():
        what = "run this in a project that builds images, or pass --project (orchestrator init writes one)"
        raise ContainerError(f"{path}: no such file: {what}")
    return images.names(project)


def check_name(project: Path, name: str) -> None:
    """``name`` is an image of images.yaml, else one error listing those that are."""
    known = require_images_file(project)
    if name not in known:
        raise ContainerError(f"no image {name!r} in {project / IMAGES_FILE}; images: {', '.join(known) or 'none'}")


# --- list: each image's state ----------------------------------------------------------------


@dataclass(frozen=True)
class Push:
    target: str  # host:path
    sha256: str  # hex, of the file pushed
    at: str  # ISO-8601
    name: str  # the image's name


@dataclass(frozen=True)
class Entry:
    name: str
    description: str
    image: Path  # where its SIF is (or would be)
    state: State
    reason: str | None  # why stale, not built or invalid
    content_hash: str | None  # of the built image (its stamp); None: not built
    current_hash: str | None  # what its inputs hash to now; None: invalid, or not computed (see entries)
    sif_sha256: str | None  # sha256:... of the SIF file (its stamp)
    size: int | None  # bytes; None: not built
    built_at: str | None
    age_s: float | None  # since the SIF was written
    pushes: tuple[Push, ...] = ()  # newest first

    @property
    def built(self) -> bool:
        return self.size is not None

    @property
    def pushed_here(self) -> bool | None:
        """Whether the newest push was of the SIF that is here now (None: never pushed)."""
        if not self.pushes:
            return None
        if not self.sif_sha256:
            return False
        return self.pushes[0].sha256 == _hex(self.sif_sha256)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "image": str(self.image),
            "built": self.built,
            "state": self.state,
            "reason": self.reason,
            "content_hash": self.content_hash,
            "current_content_hash": self.current_hash,
            "sif_sha256": self.sif_sha256,
            "size_bytes": self.size,
            "built_at": self.built_at,
            "age_s": None if self.age_s is None else round(self.age_s, 1),
            "pushes": [{"target": p.target, "sha256": p.sha256, "at": p.at, "name": p.name} for p in self.pushes],
            "last_push_is_this_image": self.pushed_here,
        }


def entries(project: Path, *, folder: Path | None = None, now: float | None = None) -> list[Entry]:
    """Every image of images.yaml, in name order.

    A built image gets the full check ``container build`` makes (big inputs known to its
    stamp are not hashed again). For an image not built yet, big inputs (a base image of
    gigabytes) are not hashed just to show a hash: its ``current_hash`` is then None."""
    names = require_images_file(project)
    folder = folder or images_folder(project)
    now = time.time() if now is None else now
    memo: DigestMemo = {}  # the project source is an input of several images: hashed once
    return [_entry(project, name, folder / f"{name}{SIF}", now, memo) for name in names]


def entry(project: Path, name: str, *, folder: Path | None = None, now: float | None = None) -> Entry:
    check_name(project, name)
    folder = folder or images_folder(project)
    return _entry(project, name, folder / f"{name}{SIF}", time.time() if now is None else now, {})


def _entry(project: Path, name: str, sif: Path, now: float, memo: DigestMemo) -> Entry:
    st = _stat(sif)
    stamp = read_stamp(sif) if st else {}
    built: _Built = {
        "content_hash": stamp.get("content_hash"),
        "sif_sha256": stamp.get("digest"),
        "size": st.st_size if st else None,
        "built_at": stamp.get("built_at"),
        "age_s": max(0.0, now - st.st_mtime) if st else None,
        "pushes": read_pushes(sif) if st else (),
    }
    description = ""
    try:
        image = images.select(project, name)
        description = str(image.values.get("description", ""))
        prepared = prepare(project, image)
        if st is None and any(_big(i) for i in prepared.inputs):
            return Entry(name, description, sif, "not built", "no image yet", current_hash=None, **built)
        fresh = freshness(prepared, sif, memo, stamp if st else None)
    except ContainerError as exc:
        return Entry(name, description, sif, "invalid", _one_line(exc), current_hash=None, **built)
    except OSError as exc:  # an input vanished or cannot be read between listing and hashing
        return Entry(name, description, sif, "invalid", f"cannot read {exc.filename}: {exc.strerror}", current_hash=None, **built)
    if st is None:
        return Entry(name, description, sif, "not built", "no image yet", current_hash=fresh.content_hash, **built)
    state: State = "stale" if fresh.reason else "up to date"
    return Entry(name, description, sif, state, fresh.reason, current_hash=fresh.content_hash, **built)


class _Built(TypedDict):
    """An Entry's fields from its SIF and stamp (each None when not built)."""

    content_hash: str | None
    sif_sha256: str | None
    size: int | None
    built_at: str | None
    age_s: float | None
    pushes: tuple[Push, ...]


def _big(inp: Input) -> bool:
    return inp.path is not None and inp.data is None and inp.path.stat().st_size >= BIG_FILE


def read_pushes(sif: Path) -> tuple[Push, ...]:
    """The push record beside ``sif`` (identity.read_pushes), newest first; none when absent or
    unreadable (it is only a record: the push itself verified the file at the destination)."""
    found = [
        Push(str(target), _hex(str(v.get("sha256") or "")), str(v.get("at") or ""), str(v.get("name") or ""))
        for target, v in identity.read_pushes(sif).items()
    ]
    return tuple(sorted(found, key=lambda p: p.at, reverse=True))


def _hex(digest: str) -> str:
    return digest.removeprefix("sha256:")


def _one_line(exc: ContainerError) -> str:
    return "; ".join([exc.headline, *exc.problems])


def _stat(path: Path) -> os.stat_result | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


# --- clean: what belongs to no image any more ------------------------------------------------


@dataclass(frozen=True)
class Removable:
    path: Path
    bytes: int
    what: str
    image: str | None = None  # the image whose build lock guards it: skipped while that build runs


@dataclass(frozen=True)
class CleanPlan:
    folder: Path
    items: tuple[Removable, ...]  # found here
    stopped: tuple[leftovers.Leftover, ...] = ()  # what stopped builds left (leftovers.find), removed by leftovers.remove
    building: tuple[str, ...] = ()  # images whose build runs now: their files were left alone

    @property
    def rows(self) -> list[tuple[Path, int, str]]:
        found: tuple[Removable | leftovers.Leftover, ...] = (*self.items, *self.stopped)
        return [(r.path, r.bytes, r.what) for r in found]

    @property
    def total(self) -> int:
        return sum(size for _, size, _ in self.rows)


FRESH_S = 60.0  # a temporary file written since may belong to a write under way (a push's record): left alone
_TEMPORARY = re.compile(r"\.(?P<name>.+?)\.sif\..+\.tmp")  # a build's image, or an atomic write's stamp or record
_LOCK = re.compile(r"\.(?P<name>.+)\.sif\.lock")
_SHA256 = re.compile(r"\.(?P<name>.+)\.sif\.sha256")  # files.sha256_cache_path: the SIF's sha256, for push and provenance
_HIDDEN = ((".lock", "build lock"), (".sha256", "sha256 cache"))  # beside NAME.sif as .NAME.sif<suffix>
# What belongs to image NAME beside NAME.sif, with what it is called when the image is gone.
_COMPANIONS = ((".sif.json", "stamp"), (".build.log", "build log"), (f".sif{PUSHES_SUFFIX}", "push record"))


def clean_plan(project: Path, *, folder: Path | None = None, now: float | None = None) -> CleanPlan:
    """What ``container clean`` would remove (see the module doc); removes nothing."""
    now = time.time() if now is None else now
    known = set(require_images_file(project))
    folder = folder or images_folder(project)
    if not folder.is_dir():
        return CleanPlan(folder, ())
    names = sorted(os.listdir(folder))
    present = set(names)
    building = sorted({n for n in _image_names(names) if _building(folder, n)})
    items: list[Removable] = []

    def add(name: str, what: str, image: str) -> None:
        size = _size(folder / name)
        if size is not None:
            items.append(Removable(folder / name, size, what, image))

    for entry_name in names:
        if entry_name.endswith(SIF) and not entry_name.startswith("."):
            image = entry_name.removesuffix(SIF)
            if image not in known and image not in building:
                add(entry_name, "old image (not in images.yaml)", image)
                for suffix, what in _COMPANIONS:
                    if f"{image}{suffix}" in present:
                        add(f"{image}{suffix}", f"its {what}", image)
                for hidden, what in _HIDDEN:
                    if f".{entry_name}{hidden}" in present:
                        add(f".{entry_name}{hidden}", f"its {what}", image)
        elif (m := _TEMPORARY.fullmatch(entry_name)) and m["name"] not in building:
            if _older_than(folder / entry_name, now - FRESH_S):
                add(entry_name, "temporary file a stopped build or write left", m["name"])
        elif (m := _LOCK.fullmatch(entry_name)) and m["name"] not in known and m["name"] not in building:
            if f"{m['name']}{SIF}" not in present:  # else listed with its image above
                add(entry_name, "build lock of an image no longer in images.yaml", m["name"])
        elif (m := _SHA256.fullmatch(entry_name)) and m["name"] not in building:
            if f"{m['name']}{SIF}" not in present:  # else listed with its image above, or kept with it
                add(entry_name, "sha256 cache without an image", m["name"])
        else:
            for suffix, what in _COMPANIONS:
                image = entry_name.removesuffix(suffix)
                if entry_name.endswith(suffix) and f"{image}{SIF}" not in present and image not in building:
                    add(entry_name, f"{what} without an image", image)
                    break
    found = leftovers.find(folder)  # a build's own temporaries by its process: theirs to name where both match
    theirs = {x.path for x in found}
    return CleanPlan(folder, tuple(r for r in items if r.path not in theirs), tuple(found), tuple(building))


def remove(plan: CleanPlan) -> tuple[int, list[Removable]]:
    """Remove what ``plan`` lists: the bytes freed, and the items skipped because their
    image's build started since the plan was made."""
    freed = 0
    skipped = []
    for item in plan.items:
        if item.image is not None and _building(plan.folder, item.image):
            skipped.append(item)
            continue
        with contextlib.suppress(FileNotFoundError):  # removed meanwhile: nothing to free
            item.path.unlink()
            freed += item.bytes
    if plan.stopped:
        freed += leftovers.remove(plan.stopped)
    return freed, skipped


def _image_names(names: Sequence[str]) -> set[str]:
    return {m["name"] for n in names if (m := _LOCK.fullmatch(n))}


def _building(folder: Path, name: str) -> bool:
    """Whether a build of image ``name`` holds its lock now (build.py's ``.NAME.sif.lock``)."""
    with _opened(folder / f".{name}{SIF}.lock") as fd:
        if fd is None:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return True
            raise
        return False  # closing the descriptor releases our hold at once


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[int | None]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def _older_than(path: Path, when: float) -> bool:
    try:
        return path.lstat().st_mtime < when
    except OSError:
        return False


def _size(path: Path) -> int | None:
    """What removing a file frees (leftovers.disk_bytes: nothing for a file linked from elsewhere);
    None when gone or a folder (not ours to remove)."""
    try:
        st = path.lstat()
    except OSError:
        return None
    return None if stat.S_ISDIR(st.st_mode) else leftovers.disk_bytes(path)


def human_age(seconds: float) -> str:
    """45 -> 45 s; 5400 -> 90 min; 90000 -> 25 h; 864000 -> 10 d."""
    for limit, unit, per in ((120, "s", 1), (7200, "min", 60), (172800, "h", 3600)):
        if seconds < limit:
            return f"{seconds / per:.0f} {unit}"
    return f"{seconds / 86400:.0f} d"
