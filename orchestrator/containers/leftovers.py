"""What builds leave while they run, and what a killed one leaves behind.

A build of image NAME by process PID keeps everything temporary in two places the tool
knows, so that a build killed outright (SIGKILL, power loss) leaves nothing anywhere else:

- ``.build-NAME-PID/`` beside the image: the staging context (``context/``, what
  ``%files`` copies in) and the runtime's own temporary folder (``tmp/``,
  APPTAINER_TMPDIR: the unpacked root file system, hundreds of MB). Where the image's
  folder has a path Apptainer's ``%files`` cannot take, it goes under
  :func:`fallback_dir` instead, and the build says so;
- ``.IMAGE.PID.tmp`` beside the image (e.g. ``.ci.sif.4242.tmp``): the image being
  written, renamed into place on success.

:func:`find` lists those whose process is gone; :func:`remove` removes them. A folder
also records the host it was made on (file ``host``): one made on another machine
sharing the file system is left alone, since its process cannot be checked from here.
And it records the runtime's pid (file ``runtime.pid``): the runtime runs in a process
group of its own, so a build killed outright can leave it running, writing into the
folder; that folder (and its temporary image) stays until the runtime has ended too.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.containers.images import SAFE_PATH

_FOLDER = re.compile(r"\.build-(?P<name>.+)-(?P<pid>\d+)")
_IMAGE = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.tmp")
HOST_FILE = "host"
RUNTIME_FILE = "runtime.pid"


@dataclass(frozen=True)
class Leftover:
    path: Path
    bytes: int  # what removing it frees (files linked from elsewhere too are not counted)
    what: str  # e.g. "build folder of tiny (process 4242 is gone)"


def build_dir(parent: Path, name: str, pid: int | None = None) -> Path:
    return parent / f".build-{name}-{os.getpid() if pid is None else pid}"


def temp_image(image: Path, pid: int | None = None) -> Path:
    return image.with_name(f".{image.name}.{os.getpid() if pid is None else pid}.tmp")


def owner(path: Path) -> int | None:
    """The pid in a build folder's or temporary image's name; None for any other name."""
    match = _FOLDER.fullmatch(path.name) or _IMAGE.fullmatch(path.name)
    return int(match["pid"]) if match else None


def fallback_dir() -> Path:
    """Where build folders go when the image's folder cannot hold them: one folder per user
    in the system's temporary folder (/tmp where that has a path %files cannot take),
    searched by every :func:`find`."""
    tmp = tempfile.gettempdir()
    return Path(tmp if SAFE_PATH.fullmatch(tmp) else "/tmp") / f"orchestrator-builds-{os.getuid()}"


def make_build_dir(path: Path) -> Path:
    """Create a build folder, with the host it belongs to."""
    path.mkdir(parents=True)
    (path / HOST_FILE).write_text(socket.gethostname() + "\n")
    return path


def find(images_dir: Path) -> list[Leftover]:
    """What builds whose process has ended left in ``images_dir`` (and in :func:`fallback_dir`)."""
    found = []
    for folder in dict.fromkeys([images_dir, fallback_dir()]):
        try:
            entries = sorted(folder.iterdir())
        except OSError:  # no such folder yet, or unreadable: nothing of ours there
            continue
        for path in entries:
            item = _leftover(path)
            if item is not None:
                found.append(item)
    return found


def remove(items: Iterable[Leftover]) -> int:
    """Remove them; the bytes freed. What cannot be removed (another user's files) stays, uncounted."""
    freed = 0
    for item in items:
        if item.path.is_dir() and not item.path.is_symlink():
            _rmtree(item.path)
        else:
            item.path.unlink(missing_ok=True)
        freed += item.bytes - (disk_bytes(item.path) if item.path.exists() or item.path.is_symlink() else 0)
    return freed


def remove_tree(path: Path) -> None:
    """Remove a build folder, read-only parts too (a root file system made under --fakeroot has some)."""
    if path.is_dir() and not path.is_symlink():
        _rmtree(path)


def disk_bytes(path: Path) -> int:
    """The disk space under ``path`` that removing it frees: allocated blocks of the files
    with no other link (a staged wheel hard-linked from pip's cache frees nothing)."""
    total = 0
    for entry in [path, *path.rglob("*")] if path.is_dir() and not path.is_symlink() else [path]:
        try:
            st = entry.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) or st.st_nlink == 1:
            total += st.st_blocks * 512
    return total


def _leftover(path: Path) -> Leftover | None:
    folder, image = _FOLDER.fullmatch(path.name), _IMAGE.fullmatch(path.name)
    match = folder or image
    if match is None or not (folder and path.is_dir() or image and path.is_file()):
        return None
    pid = int(match["pid"])
    if _alive(pid):
        return None
    if folder and (not _made_here(path) or _runtime_alive(path)):
        return None
    # An image is written by the runtime of the folder with its pid: left while that runtime runs.
    if image and any(_runtime_alive(f) for f in path.parent.glob(f".build-*-{pid}") if _FOLDER.fullmatch(f.name)):
        return None
    what = f"{'build folder' if folder else 'unfinished image'} of {match['name']} (process {pid} is gone)"
    return Leftover(path, disk_bytes(path), what)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs. A zombie does not: a killed runtime stays one until
    whoever inherited it reaps it, which a container's or CI job's init may never do."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):  # no /proc (not Linux): kill's answer stands
        return True


def _runtime_alive(folder: Path) -> bool:
    try:
        return _alive(int((folder / RUNTIME_FILE).read_text()))
    except (OSError, ValueError):  # no runtime started yet, or killed as it started
        return False


def _made_here(folder: Path) -> bool:
    try:
        return (folder / HOST_FILE).read_text().strip() == socket.gethostname()
    except OSError:  # killed before it wrote the file: it was made here a moment ago, or is empty
        return True


def _rmtree(path: Path) -> None:
    """rmtree, after making every folder in it writable and searchable: a root file system
    made under --fakeroot has read-only ones, which stop a plain rmtree. What still cannot
    be removed (another user's files) stays; :func:`remove` counts only what went."""
    with contextlib.suppress(OSError):
        os.chmod(path, stat.S_IRWXU | os.stat(path).st_mode)
    for root, dirs, _ in os.walk(path):  # top-down: each folder is opened up before os.walk lists it
        for d in dirs:
            sub = os.path.join(root, d)
            with contextlib.suppress(OSError):
                if not os.path.islink(sub):
                    os.chmod(sub, stat.S_IRWXU | os.stat(sub).st_mode)
    shutil.rmtree(path, ignore_errors=True)
