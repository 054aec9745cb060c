"""Files other processes may read at any moment: written whole, hashed, locked.

One way to do each, so every writer gets the same guarantees: a reader sees the
old file or the new one, never a part; a failed write leaves no temporary file
behind; a lock is released when its holder dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

_CHUNK = 1 << 20


def atomic_write(path: Path, data: str | bytes, *, mode: int = 0o644, durable: bool = False) -> None:
    """Replace ``path`` with ``data`` in one rename.

    The temporary file is unique (mkstemp), so concurrent writers never share one.
    ``durable`` also fsyncs before the rename: for state that must survive a
    crash right after it was written (the ledger, after ``sbatch``).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, mode)  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_if_changed(path: Path, data: str | bytes, *, mode: int = 0o644) -> bool:
    """:func:`atomic_write` unless ``path`` already holds ``data`` (its mtime then stays,
    which make-like tools and DVC notice); True when it wrote."""
    new = data.encode() if isinstance(data, str) else data
    try:
        if path.stat().st_size == len(new) and path.read_bytes() == new:
            return False
    except OSError:
        pass
    atomic_write(path, new, mode=mode)
    return True


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file, read in chunks (images are gigabytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the block.

    Closing the descriptor releases it, also when the process is killed, so a
    crashed holder never leaves a stale lock.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def raise_open_files_limit(wanted: int) -> None:
    """Let this process hold ``wanted`` files open, as far as the hard limit allows
    (holding one lock per item of a big sweep passes the usual soft limit of 1,024)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
