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
import re
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


# An image's sha256 (a file of gigabytes: seconds to hash), remembered while the file
# stays the same by size, mtime and inode, as make and DVC decide it: in this process,
# and beside the file for the next one (a push, a job's provenance, the next build).
_SHA256_MEMO: dict[tuple[str, int, int, int], str] = {}
_HEX64 = re.compile(r"[0-9a-f]{64}")


def sha256_cache_path(path: Path) -> Path:
    """Where :func:`cached_sha256` remembers ``path``'s sha256: ``.NAME.sha256`` beside it."""
    return path.with_name(f".{path.name}.sha256")


def cached_sha256(path: Path) -> str:
    """The hex sha256 of ``path``, hashed only when its size, mtime or inode changed since it
    was last hashed here or by another process. Raises OSError when it cannot be read."""
    path = Path(path).absolute()
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns, st.st_ino)
    if key in _SHA256_MEMO:
        return _SHA256_MEMO[key]
    stamp = f"{st.st_size} {st.st_mtime_ns} {st.st_ino}"
    try:
        digest, cached = sha256_cache_path(path).read_text().split(" ", 1)
        if cached.strip() == stamp and _HEX64.fullmatch(digest):
            _SHA256_MEMO[key] = digest
            return digest
    except (OSError, ValueError):
        pass
    digest = sha256_file(path)
    after = path.stat()
    if (after.st_size, after.st_mtime_ns, after.st_ino) == key[1:]:  # not being written meanwhile
        remember_sha256(path, digest, st)
    return digest


def remember_sha256(path: Path, digest: str, st: os.stat_result | None = None) -> None:
    """Record ``digest`` as the sha256 of ``path`` as it is now (or as ``st`` found it), for
    :func:`cached_sha256`: a writer that hashed the file already (the image build) saves the next
    reader the hash. An unwritable folder only loses the cache beside the file."""
    path = Path(path).absolute()
    st = st or path.stat()
    _SHA256_MEMO[(str(path), st.st_size, st.st_mtime_ns, st.st_ino)] = digest
    try:
        atomic_write(sha256_cache_path(path), f"{digest} {st.st_size} {st.st_mtime_ns} {st.st_ino}\n")
    except OSError:
        pass


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
