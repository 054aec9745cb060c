"""Files other processes may read at any moment: written whole, read safely, hashed, locked.

One way to do each, so every writer gets the same guarantees: a reader sees the
old file or the new one, never a part; a failed write leaves no temporary file
behind; a lock is released when its holder dies. Every reader of a file it did not
write itself (a profile, a ledger entry, a manifest, a lock file) gets the same guard:
a regular file only, never more than a cap (:func:`read_regular`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from orchestrator.errors import OrchestratorError, UnreadableFile

_CHUNK = 1 << 20


def missing_folders(path: Path) -> list[Path]:
    """``path`` and those of its parents that do not exist (nothing at all there), deepest first."""
    missing = []
    for folder in (path, *path.parents):
        if os.path.lexists(folder):
            break
        missing.append(folder)
    return missing


def make_dirs(path: Path) -> None:
    """``mkdir -p``: ``path`` and its missing parents, one level at a time. pathlib's
    ``mkdir(parents=True)`` recurses once per missing level, so a path a user gave (``--out``)
    a thousand folders deep was a RecursionError instead of the OSError a bad path is."""
    for folder in reversed(missing_folders(path)):
        folder.mkdir(exist_ok=True)
    path.mkdir(exist_ok=True)  # there already: FileExistsError where it is not a folder


def atomic_write(path: Path, data: str | bytes, *, mode: int = 0o644, durable: bool = False) -> None:
    """Replace ``path`` with ``data`` in one rename.

    The temporary file is unique (mkstemp), so concurrent writers never share one.
    ``durable`` also fsyncs before the rename: for state that must survive a
    crash right after it was written (the ledger, after ``sbatch``).
    """
    make_dirs(path.parent)
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


_KINDS = (
    (stat.S_ISDIR, "folder", "a folder"),
    (stat.S_ISLNK, "link", "a symbolic link"),
    (stat.S_ISFIFO, "special", "a FIFO"),
    (stat.S_ISSOCK, "special", "a socket"),
    (stat.S_ISCHR, "special", "a character device"),
    (stat.S_ISBLK, "special", "a block device"),
)


def kind_words(mode: int) -> str:
    """What a file that is not a regular one is, in words: "a folder", "a FIFO", "a block device"..."""
    return _what(mode)[1]


def _what(mode: int) -> tuple[str, str]:
    for test, kind, words in _KINDS:
        if test(mode):
            return kind, words
    return "special", "a special file"


def umask() -> int:
    """This process's umask: what a new file's mode loses. Read from /proc where it is there, as
    setting it to read it (the fallback) changes it for every thread until it is set back."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def display_path(path: Path) -> str:
    """A path as the user would type it here: relative to the working folder when under it, else as it is."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def size_text(n: int) -> str:
    """``n`` bytes in words: 1 MiB, 64 KiB, 300 bytes."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def read_regular(path: Path, limit: int, *, follow_symlinks: bool = False) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``limit`` bytes.

    Anything else raises :class:`UnreadableFile` without being read: a FIFO would block
    the reader until some writer came, a device such as /dev/zero never ends, a folder is
    not a file. The type is looked at (``lstat``) before opening, and again on what was
    opened (``fstat``), so a file swapped for a FIFO in between cannot block either. A
    symbolic link is refused unless ``follow_symlinks`` (a path the user typed may be one;
    a file the orchestrator wrote itself never is).
    """
    path = Path(path)
    check_regular(path, limit, follow_symlinks=follow_symlinks)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise UnreadableFile(path, "unreadable", f"cannot be read: {_reason(exc)}") from None
    try:
        _check_kind(path, os.fstat(fd))
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, min(_CHUNK, limit + 1 - size))):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise UnreadableFile(path, "unreadable", f"cannot be read: {_reason(exc)}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise UnreadableFile(path, "too-large", f"is larger than {size_text(limit)}")
    return b"".join(chunks)


def check_regular(path: Path, limit: int, *, follow_symlinks: bool = False) -> os.stat_result:
    """What :func:`read_regular` checks before opening (type and size), for a file another
    program is about to read; its ``stat``, or :class:`UnreadableFile`."""
    path = Path(path)
    try:
        st = path.stat() if follow_symlinks else path.lstat()
    except FileNotFoundError:
        raise UnreadableFile(path, "missing", "does not exist") from None
    except (OSError, ValueError) as exc:  # unreachable, a name too long, a NUL in it
        raise UnreadableFile(path, "unreadable", f"cannot be read: {_reason(exc)}") from None
    _check_kind(path, st)
    if st.st_size > limit:
        raise UnreadableFile(path, "too-large", f"is larger than {size_text(limit)}")
    return st


def read_text(path: Path, limit: int, *, follow_symlinks: bool = False) -> str:
    """:func:`read_regular`, decoded as UTF-8 text; binary content (bytes that are not
    UTF-8, or NUL) raises :class:`UnreadableFile` with the kind "not-text"."""
    raw = read_regular(path, limit, follow_symlinks=follow_symlinks)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(path, "not-text", f"is not a text file (not UTF-8 at byte {exc.start})") from None
    if "\0" in text:
        raise UnreadableFile(path, "not-text", "is a binary file (it holds NUL bytes)")
    return text


def _check_kind(path: Path, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise UnreadableFile(path, "folder", "is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        kind, words = _what(st.st_mode)
        raise UnreadableFile(path, kind, f"is not a regular file ({words})")


def _reason(exc: Exception) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


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


def edit_target(root: Path, path: Path) -> Path:
    """The file to write when the tool edits ``path``, a file of the project ``root`` that the
    user may have made a symbolic link (params.yaml, dvc.yaml, .gitignore, .dvcignore): itself,
    or the file its link leads to when that is inside the project, so the link stays a link.
    One policy for every such edit: nothing is written outside the project through a link, and
    no file is made where a link leads nowhere (:class:`LinkRefused`, before anything is written)."""
    if not path.is_symlink():
        return path
    target = Path(os.path.realpath(path))
    top = Path(os.path.realpath(root))
    if target != top and top not in target.parents:
        raise LinkRefused(f"{path} is a symbolic link to {target}, outside the project: the tool never writes outside it through a link")
    if not target.is_file():
        raise LinkRefused(f"{path} is a symbolic link to {target}, which is not a file: the tool makes no file through a link")
    return target


class LinkRefused(OrchestratorError):
    """A file the tool would edit is a link it may not write through (:func:`edit_target`)."""

    def __init__(self, headline: str) -> None:
        super().__init__(headline, hints=["edit it yourself, or make it a file of the project; nothing was changed"])


@contextlib.contextmanager
def chdir(path: Path) -> Iterator[None]:
    """The working directory ``path`` for the block, then the one before: Python 3.11's
    ``contextlib.chdir``, which 3.10 (supported) lacks."""
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)
