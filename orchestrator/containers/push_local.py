"""A push to a path on this machine: the image copied with the remote push's temporary name,
guard, mode, verification, rename and record, in Python."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from orchestrator.containers.identity import Identity, identity_at, sidecar_text
from orchestrator.containers.push_target import ChecksumMismatch, PushResult, ShipError, Target, guard
from orchestrator.util import files
from orchestrator.util.files import sha256_file


def _mode_for(local_mode: int) -> int:
    """The mode rsync gives a new file without -p: the source's permission bits less the umask."""
    return local_mode & 0o777 & ~files.umask()


# --- a copy on this machine ---------------------------------------------------------------


def copy_here(
    image: Path, t: Target, target: str, digest: str, st: os.stat_result, ours: Identity, replace: bool, say: Callable[[str], None]
) -> PushResult:
    dest, part, sidecar = Path(t.path), Path(t.part), Path(t.sidecar)
    size, mode = st.st_size, _mode_for(st.st_mode)

    def fail(why: str, exc: OSError) -> ShipError:
        return ShipError(f"copy of {image} to {dest} failed: {why}: {exc.strerror or exc}", hints=[f"nothing was installed at {dest}"])

    try:
        if dest.is_file():
            there_size = dest.stat().st_size
            there_sha = sha256_file(dest) if there_size == size else None
            if there_sha == digest:
                say(f"{dest} is already this image (sha256 {digest[:12]}); nothing to copy")
                _heal_here(dest, mode, sidecar, ours, digest, size)
                return PushResult(target, None, str(dest), digest, size, False, 0, "skip")
            guard(str(dest), identity_at(dest, sidecar, there_size, there_sha), image, ours, replace, say)
    except OSError as exc:
        raise fail(f"cannot read {dest}", exc) from exc
    say(f"copying {image} ({size:,} bytes) to {dest}")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(image, part)
        os.chmod(part, mode)  # copyfile keeps the mode of a leftover part
        got = sha256_file(part)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # removed, as a remote one (see push_remote._Session.disk_full)
            left = part.stat().st_size if part.exists() else 0
            _unlink(part)
            raise ShipError(
                f"copy of {image} to {dest} failed: {exc.strerror}: the partial file {part} ({left:,} bytes) was removed",
                hints=[f"make room for the image's {size:,} bytes there, then copy again", f"nothing was installed at {dest}"],
            ) from exc
        _unlink(part)
        raise fail(f"cannot write {part}", exc) from exc
    if got != digest:
        _unlink(part)
        raise ChecksumMismatch(
            f"copy of {image} to {dest} failed: checksum mismatch (did the image change meanwhile?)",
            [f"local sha256 {digest}, copy {got}"],
            [f"nothing was installed at {dest}; copy again"],
        )
    try:
        os.replace(part, dest)
    except OSError as exc:
        _unlink(part)
        raise fail(f"cannot move the copy into place at {dest}", exc) from exc
    _write_sidecar_here(sidecar, sidecar_text(ours, digest, size), say)
    return PushResult(target, None, str(dest), digest, size, True, size, "copy")


def _heal_here(dest: Path, mode: int, sidecar: Path, ours: Identity, digest: str, size: int) -> None:
    """The image is already at ``dest``: give it the mode a copy gives, and a sidecar if it has none (best effort)."""
    try:
        os.chmod(dest, mode)
    except OSError:
        pass  # another user's file
    there = identity_at(dest, sidecar, size, digest)
    if there.name != ours.name or not sidecar.is_file():
        _write_sidecar_here(sidecar, sidecar_text(ours, digest, size), lambda _: None)


def _write_sidecar_here(sidecar: Path, text: str, say: Callable[[str], None]) -> None:
    try:
        files.atomic_write(sidecar, text + "\n", mode=0o666 & ~files.umask())
    except OSError as exc:
        say(f"note: could not write {sidecar}: {exc.strerror or exc}; the next copy over this image reads its own label instead")


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
