"""Where a pushed image goes and what may be replaced there; what a push reports, and how it fails.

``[user@]host:/dir/name.sif`` (as rsync and scp take it) or a path on this machine
(:func:`parse_target`); a profile's ``container.image`` with its ``${NAME}``s filled in
(:func:`remote_image_path`); the rule that a file holding another image is replaced only
when the caller says so (:func:`guard`). The push itself: :mod:`~orchestrator.containers.push`.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from orchestrator.containers.identity import NAME_LABEL, SIDECAR_SUFFIX, Identity
from orchestrator.errors import OrchestratorError
from orchestrator.scripts import quoting
from orchestrator.util import patterns


class ShipError(OrchestratorError):
    """An image could not be pushed; nothing was installed at the final path."""

    exit_code = 1


class ChecksumMismatch(ShipError):
    """The copy that arrived is not the image (corrupted, or the image changed meanwhile)."""


class OtherImageThere(ShipError):
    """The target holds another image, or one whose name cannot be read; nothing was sent."""

    exit_code = 2


REPLACE_FLAG = "--replace-other-image"  # the CLI's spelling of replace_other_image, which the refusal names


@dataclass(frozen=True)
class PushResult:
    target: str  # as given
    host: str | None  # [user@]host, None for a copy on this machine
    remote_path: str  # the final path (on the host, or here)
    sha256: str  # of the local image, and verified equal at remote_path
    size: int
    transferred: bool  # False: the file at remote_path already was this image
    bytes_transferred: int  # new data sent: rsync's "Literal data"; scp and copy: the file; 0 when skipped
    method: Literal["skip", "rsync", "scp", "copy"]
    resumed_from: int = 0  # bytes of an interrupted earlier push found at the temporary name


@dataclass(frozen=True)
class Target:
    host: str | None  # "[user@]host" as ssh takes it (IPv6 without brackets); None: this machine
    path: str  # the final path; a relative remote path is relative to the remote home, as "./..."
    rsync_host: str | None = None  # the host as rsync and scp take it (IPv6 in brackets)

    @property
    def directory(self) -> str:
        return posixpath.dirname(self.path) or "."

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)

    @property
    def part(self) -> str:
        """The hidden temporary name the image is transferred to, beside the final one."""
        return posixpath.join(self.directory, f".{self.name}.part")

    @property
    def sidecar(self) -> str:
        """What the last push installed at the final path (see :func:`~orchestrator.containers.identity.sidecar_text`), beside it."""
        return self.path + SIDECAR_SUFFIX

    @property
    def sidecar_tmp(self) -> str:
        return posixpath.join(self.directory, f".{self.name}{SIDECAR_SUFFIX}.tmp")

    def show(self) -> str:
        return f"{self.rsync_host}:{self.path}" if self.host else self.path


# [user@]host:path, where host is a name/address without ':' or '/', or [IPv6].

_REMOTE = re.compile(r"(?P<user>[^@/:\s]+@)?(?:\[(?P<v6>[0-9A-Fa-f:.%\w]+)\]|(?P<host>[^:/\s\[\]@]+)):(?P<path>.*)", re.DOTALL)


def parse_target(target: str) -> Target:
    """``[user@]host:/dir/name.sif`` (as rsync and scp: a ':' before any '/'), else a local path."""
    if not target:
        raise ShipError("no push target given", hints=["give [user@]host:/remote/dir/name.sif, or a path on this machine"])
    if patterns.CONTROL.search(target):
        raise ShipError(f"push target {target!r} contains control characters (a newline?)")
    m = _REMOTE.fullmatch(target)
    if not m:
        path = target
        if path.endswith("/") or Path(path).is_dir():
            raise ShipError(f"push target {target!r} is a directory", hints=["name the image file, e.g. DIR/orchestrator.sif"])
        return Target(None, path)
    user, host, path = m.group("user") or "", m.group("v6") or m.group("host"), m.group("path")
    if host.startswith("-") or user.startswith("-"):
        raise ShipError(f"push target {target!r}: a host name cannot start with '-'")
    if not path or path.endswith("/") or posixpath.basename(path) in (".", ".."):
        raise ShipError(
            f"push target {target!r} does not name a file", hints=["name the image file, e.g. host:/project/x/orchestrator.sif"]
        )
    if path.startswith("~/"):
        path = path[2:]  # ssh, rsync and scp start in the remote home; a quoted '~' would not expand
    elif path.startswith("~"):
        raise ShipError(f"push target {target!r}: only ~/ (your own home) is understood; give the full path")
    if not path.startswith("/") and not path.startswith("./"):
        path = "./" + path  # never an option ('-...') or rsync's daemon syntax ('host::...')
    rsync_host = f"{user}[{host}]" if m.group("v6") else f"{user}{host}"
    return Target(f"{user}{host}", path, rsync_host)


def remote_image_path(template: str, values: Mapping[str, str]) -> str:
    """A profile's ``container.image`` (``/project/${SLURM_JOB_ACCOUNT}/x.sif``) with its ``${NAME}``s filled in."""
    missing = sorted({n for n in quoting.runtime_refs(template) if n not in values})
    if missing:
        raise ShipError(
            f"container.image {template!r} refers to {', '.join(missing)}, known only on the cluster",
            hints=["give the full remote path of the image instead"],
        )
    return patterns.RUNTIME_REF.sub(lambda m: values[m.group(1)], template)


def guard(where: str, there: Identity, image: Path, ours: Identity, replace: bool, say: Callable[[str], None]) -> None:
    """Refuse to put ``ours`` over a file that holds another image, or one of unknown name."""
    if there.name is not None and there.name == ours.name:
        return  # a newer build of the same image: the usual update
    held = (
        there.describe()
        if there.name
        else f"an image of unknown name (no up-to-date {posixpath.basename(where)}{SIDECAR_SUFFIX} beside it, no {NAME_LABEL} label in it)"
    )
    if replace:
        say(f"{where} holds {held}; replacing it ({REPLACE_FLAG})")
        return
    gave = repr(ours.name) if ours.name else f"{image}, which has no {NAME_LABEL} label"
    raise OtherImageThere(f"{where} holds {held}, you gave {gave}; pass {REPLACE_FLAG} to overwrite")
