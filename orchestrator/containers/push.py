"""Shipping a built container image to where the jobs read it: rsync over ssh, verified, atomic.

``push(image, "user@host:/project/x/containers/orchestrator.sif", runner)`` makes the file
at the remote path byte-identical to the local image, or raises :class:`ShipError` and
leaves whatever was at that path before untouched. A push is three ssh connections with
a check here after the first (jobs only ever open the final path):

1. probe: create the remote directory; if a file is already at the final path, its size,
   its sha256 when the size is the image's, the record beside it (below) and, when it is
   not this image, its first 64 KiB. Equal sha256: nothing to transfer
   (``PushResult.transferred`` is False).
2. guard, here: a file at the final path that holds ANOTHER image is never overwritten
   unless the caller says so (``replace_other_image``, the CLI's ``--replace-other-image``):
   :class:`OtherImageThere` names what is there and what was given, and nothing is sent.
   What is there is read from the record the last push wrote beside the image,
   ``NAME.orchestrator.json`` (name, sha256, content hash, size, build and push times),
   trusted only while the file is not newer than it and has its size; else from the
   image's own ``org.orchestrator.image`` label, parsed from the SIF's descriptors in
   those 64 KiB (no container runtime needed on the host; both are read by
   :mod:`~orchestrator.containers.identity`). A file whose name neither
   gives is "of unknown name" and refused the same way. The same name with other
   content (a newer build of the same image) is the usual update and goes ahead.
3. transfer to a hidden temporary name beside the final one, ``.NAME.part``, with
   ``rsync --inplace`` (which keeps what arrived when it is interrupted): the next push
   uses that file as the basis of rsync's delta transfer, so only what is missing
   crosses the network again. ``--ignore-times``: never trust a leftover's size and
   mtime, always let the checksums decide.
4. verify and commit: the sha256 of ``.NAME.part``, computed on the remote host, must
   equal the local one; it is given the mode an uninterrupted rsync gives a new file
   (the local image's mode less the remote umask: rsync writes into 0600 and sets the
   mode only when a transfer ends, and never touches an existing file's mode without
   ``-p``, so a part resumed after Ctrl-C would stay 0600, unreadable to the project
   group); then ``mv -f`` renames it over the final path, an atomic rename within one
   directory, and the record is written beside it (a temporary file and a rename). Jobs
   that have the old image open keep reading the old file. On a mismatch the temporary
   file is removed and :class:`ChecksumMismatch` raised; the final path is not touched.

A transfer that stops on a full disk (or quota) removes its partial file and says so
with its size; one that was interrupted keeps it for the next push to resume (see
``_Session.disk_full`` for why the two differ).

Each successful push (or a verified "nothing to push") is also recorded beside the
LOCAL image, in ``NAME.sif.pushes.json``: ``{target: {"sha256", "at", "name"}}``, which
``orchestrator container list`` shows (:func:`~orchestrator.containers.identity.record_push`).

Remote commands: each is a constant one-line POSIX sh script run as
``sh -c SCRIPT sh ARG...``, and every word of that line is ``shlex.quote``d. ssh joins
its arguments with spaces and the remote login shell parses the result, so an unquoted
path with a space, a quote or ``$(...)`` would be split or executed there; here values
reach the script only as positional parameters. One line, single quotes, no
``$'...'``: csh and tcsh login shells parse it the same way as sh and bash. rsync gets
the remote path with ``-s`` (``--protect-args``/``--secluded-args``), which sends it
over rsync's protocol instead of through the remote shell, on old rsyncs too.

The local image's sha256 is computed once, streaming, and cached beside the image in
``.NAME.sha256`` keyed by size, mtime and inode (the build writes it), so pushing a big
image again (the usual case: nothing changed) costs one remote hash and no local one.

A target without ``host:`` is a path on this machine: the image is copied there with
the same temporary name, guard, mode, verification, rename and record, in Python.
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NoReturn

from orchestrator.containers.identity import (
    HEAD_BYTES,
    NAME_LABEL,
    SIDECAR_SUFFIX,
    Identity,
    identify,
    identity_at,
    record_push,
    sidecar_identity,
    sidecar_text,
    sif_identity,
)
from orchestrator.errors import OrchestratorError
from orchestrator.scripts import quoting
from orchestrator.util import files, patterns
from orchestrator.util.files import sha256_file
from orchestrator.util.runner import Completed, Runner


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
        """What the last push installed at the final path (see :func:`sidecar_text`), beside it."""
        return self.path + SIDECAR_SUFFIX

    @property
    def sidecar_tmp(self) -> str:
        return posixpath.join(self.directory, f".{self.name}{SIDECAR_SUFFIX}.tmp")

    def show(self) -> str:
        return f"{self.rsync_host}:{self.path}" if self.host else self.path


# [user@]host:path, where host is a name/address without ':' or '/', or [IPv6].
_REMOTE = re.compile(r"(?P<user>[^@/:\s]+@)?(?:\[(?P<v6>[0-9A-Fa-f:.%\w]+)\]|(?P<host>[^:/\s\[\]@]+)):(?P<path>.*)", re.DOTALL)
# Paths scp can take as they are, in both its protocols (see _Session.scp).
_SCP_SAFE = re.compile(r"[A-Za-z0-9._/+%=,:@-]+")


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


# --- the local image and its sha256 -------------------------------------------------------

_CHUNK = 1 << 20


def cache_path(image: Path) -> Path:
    return files.sha256_cache_path(image)


def local_sha256(image: Path) -> str:
    """The image's sha256 (:func:`orchestrator.util.files.cached_sha256`: remembered beside it
    while its size, mtime and inode match; the build leaves it there)."""
    image = Path(image)
    _stat_image(image)
    try:
        return files.cached_sha256(image)
    except OSError as exc:
        raise ShipError(f"cannot read the image {image}: {exc.strerror or exc}") from exc


def _stat_image(image: Path) -> os.stat_result:
    try:
        st = image.stat()
    except FileNotFoundError:
        raise ShipError(f"the image {image} does not exist", hints=["build it first (`orchestrator container build`)"]) from None
    except OSError as exc:
        raise ShipError(f"cannot read the image {image}: {exc.strerror or exc}") from exc
    if not image.is_file():
        raise ShipError(f"the image {image} is not a file")
    return st


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


def _mode_for(local_mode: int) -> int:
    """The mode rsync gives a new file without -p: the source's permission bits less the umask."""
    return local_mode & 0o777 & ~files.umask()


# --- push ---------------------------------------------------------------------------------

# ssh options added after the caller's (ssh takes the first value of each option, so the
# caller's win): fail fast on a dead host, notice a dead connection during a long hash.
DEFAULT_SSH_OPTIONS = ("-o", "ConnectTimeout=20", "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4")
RSYNC_IO_TIMEOUT_S = 300
_TAG = "orchestrator-ship:"  # marks our lines in remote output (a noisy .bashrc may print too)
_LOGIN_REFUSED = re.compile(r"Permission denied \([a-z,-]+\)\.")  # ssh's, not a file's "Permission denied (13)"

_DISK_FULL = re.compile(r"No space left on device|Disk quota exceeded|\((?:28|122)\)$", re.MULTILINE)  # ENOSPC, EDQUOT


def _chmod_sh(mode: str, file: str) -> str:
    """sh: give ``file`` the mode rsync gives a new file, ``mode`` (the local image's, octal) less the umask."""
    return f'm=$(umask) && chmod -- "$(printf %o $(( 0{mode} & ~0$m & 511 )))" "{file}"'


def _sidecar_sh(final: str, tmp: str, text: str) -> str:
    """sh: write the sidecar ``final`` with ``text`` by a rename; on failure say so (the image is in place all the same)."""
    write = f'printf "%s\\n" "{text}" > "{tmp}" && mv -f -- "{tmp}" "{final}"'
    return f'{{ {write}; }} || {{ rm -f -- "{tmp}"; echo "{_TAG} sidecar-failed 1"; }}'


# $1 dir, $2 final, $3 part, $4 local size, $5 sidecar, $6 local sha256, $7 local mode. Exit
# codes are ours (mapped in _Session.probe). The sidecar counts only while the final file is
# not newer than it (find -newer: POSIX, unlike stat). The same image already there gets the
# mode a fresh push gives it (an older push may have left it 0600).
PROBE_SCRIPT = (
    'mkdir -p -- "$1" || exit 90; '
    '[ -d "$2" ] && exit 91; '
    'if [ -f "$2" ]; then s=$(wc -c < "$2") || exit 92; echo "' + _TAG + ' final $s"; h=; '
    'if [ $s -eq "$4" ]; then h=$(sha256sum < "$2") || exit 92; h=${h%% *}; echo "' + _TAG + ' sha256 $h"; fi; '
    'if [ -f "$5" ] && [ -z "$(find "$2" -prune -newer "$5")" ]; then '
    'printf "%s\\n" "' + _TAG + ' sidecar $(dd if="$5" bs=4096 count=1 2>/dev/null | head -n 1)"; fi; '
    'if [ "$h" = "$6" ]; then ' + _chmod_sh("$7", "$2") + " 2>/dev/null; "
    'else echo "' + _TAG + ' head"; '
    'dd if="$2" bs=' + str(HEAD_BYTES) + ' count=1 2>/dev/null | od -An -v -tx1; echo "' + _TAG + ' end"; fi; '
    "fi; "
    'if [ -f "$3" ]; then echo "' + _TAG + ' part $(wc -c < "$3")"; fi; '
    '[ -w "$1" ] || echo "' + _TAG + ' readonly 1"'
)
# $1 part, $2 final, $3 expected sha256, $4 local mode, $5 sidecar, $6 its temporary name, $7 its text.
COMMIT_SCRIPT = (
    'h=$(sha256sum < "$1") || exit 94; h=${h%% *}; echo "' + _TAG + ' sha256 $h"; '
    'if [ "$h" != "$3" ]; then rm -f -- "$1"; exit 95; fi; ' + _chmod_sh("$4", "$1") + " || exit 97; "
    'mv -f -- "$1" "$2" || exit 96; ' + _sidecar_sh("$5", "$6", "$7")
)
# $1 sidecar, $2 its temporary name, $3 its text: for an image already in place without one.
SIDECAR_SCRIPT = _sidecar_sh("$1", "$2", "$3")
# $1 part: what a transfer that filled the disk left.
DISCARD_SCRIPT = 'if [ -f "$1" ]; then echo "' + _TAG + ' part $(wc -c < "$1")"; rm -f -- "$1" || exit 98; fi'


def push(
    image: Path,
    target: str,
    runner: Runner,
    *,
    ssh_options: Sequence[str] = (),
    say: Callable[[str], None] | None = None,
    replace_other_image: bool = False,
) -> PushResult:
    """Make ``target`` (``[user@]host:/dir/name.sif`` or a local path) hold exactly ``image``.

    ``ssh_options`` are ssh's own (``-p 2222``, ``-i KEY``, ``-o Name=value``, ``-J jump``);
    they are given to every ssh, rsync and scp this runs. ``replace_other_image``: overwrite
    a file there that holds another image (or one of unknown name) instead of raising
    :class:`OtherImageThere`. Raises :class:`ShipError`.
    """
    image = Path(image).absolute()  # a path with ':' before any '/' would be a host to rsync
    t = parse_target(target)
    if isinstance(ssh_options, str):
        raise TypeError("ssh_options is a sequence of words, e.g. ['-p', '2222']")
    say = say or (lambda _: None)
    before = _stat_image(image)
    digest = local_sha256(image)
    ours = identify(image)
    if t.host is None:
        result = _copy_here(image, t, target, digest, before, ours, replace_other_image, say)
    else:
        options = [*ssh_options, *DEFAULT_SSH_OPTIONS]
        result = _push_remote(image, t, target, runner, options, digest, before, ours, replace_other_image, say)
    record_push(image, target, digest, ours.name, say)
    return result


def _push_remote(image, t: Target, target, runner, ssh_options, digest, before, ours: Identity, replace: bool, say) -> PushResult:
    s = _Session(image, t, target, runner, ssh_options)
    mode = f"{before.st_mode & 0o777:o}"
    found = s.probe(before.st_size, digest, mode)
    if found.final_sha == digest:
        say(f"{t.show()} is already this image (sha256 {digest[:12]}); nothing to push")
        there = sidecar_identity(found.sidecar, found.final_size, digest)
        if not found.readonly and (there is None or there.name != ours.name):
            s.write_sidecar(sidecar_text(ours, digest, before.st_size), say)
        return PushResult(target, t.host, t.path, digest, before.st_size, False, 0, "skip")
    if found.final_size is not None:
        guard(t.show(), found.identity(), image, ours, replace, say)
    if found.readonly:
        s.fail(f"the remote directory {t.directory} is not writable", s.probed)
    rsync = runner.which("rsync")
    method: Literal["rsync", "scp"] = "rsync" if rsync else "scp"
    resumed = f", resuming from {found.part_size:,} bytes already there" if found.part_size and method == "rsync" else ""
    say(f"pushing {image} ({before.st_size:,} bytes) to {t.show()} with {method}{resumed}")
    sent = s.rsync(before.st_size) if rsync else s.scp(before.st_size)
    after = image.stat()
    changed = (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns)
    s.commit(digest, changed, mode, sidecar_text(ours, digest, before.st_size), say)
    say(f"{t.show()}: sha256 {digest[:12]} verified")
    resumed_from = found.part_size if method == "rsync" else 0
    return PushResult(target, t.host, t.path, digest, before.st_size, True, sent, method, resumed_from)


@dataclass(frozen=True)
class _Found:
    """What the probe found at the target."""

    final_size: int | None  # None: no file at the final path
    final_sha: str | None  # when its size is the image's
    part_size: int  # of a leftover .part, 0 if none
    sidecar: str | None  # its text, when the final file is not newer
    head: bytes | None  # the final file's first HEAD_BYTES, when it is not this image
    readonly: bool

    def identity(self) -> Identity:
        there = sidecar_identity(self.sidecar, self.final_size, self.final_sha)
        if there is None and self.head is not None:
            head = self.head
            there = sif_identity(lambda offset, size: head[offset : offset + size])
        return there or Identity(None)


class _Session:
    """The remote steps of one push; every failure becomes a ShipError naming its command."""

    def __init__(self, image: Path, t: Target, target: str, runner: Runner, ssh_options: list[str]) -> None:
        self.image, self.t, self.target, self.runner, self.ssh_options = image, t, target, runner, ssh_options

    def ssh_argv(self, script: str, *args: str) -> list[str]:
        # "--": the host can never be taken for an option; the command is ONE string,
        # every word quoted, because the remote shell parses it.
        return ["ssh", *self.ssh_options, "--", str(self.t.host), shlex.join(["sh", "-c", script, "sh", *args])]

    def probe(self, size: int, digest: str, mode: str) -> _Found:
        t = self.t
        done = self.run(self.ssh_argv(PROBE_SCRIPT, t.directory, t.path, t.part, str(size), t.sidecar, digest, mode))
        reasons = {
            90: f"cannot create the remote directory {t.directory}",
            91: f"the remote path {t.path} is a directory",
            92: f"cannot read the remote file {t.path}",
        }
        if done.returncode in reasons:
            self.fail(reasons[done.returncode], done)
        if done.returncode != 0:
            self.fail_ssh(done)
        tagged = _tagged(done.stdout)
        self.probed = done
        final = tagged.get("final")
        return _Found(
            final_size=int(final) if final else None,
            final_sha=tagged.get("sha256") or None,
            part_size=int(tagged.get("part", "0") or 0),
            sidecar=tagged.get("sidecar"),
            head=_head(done.stdout),
            readonly="readonly" in tagged,
        )

    def rsync(self, size: int) -> int:
        argv = [
            "rsync",
            "-s",  # the remote path goes over rsync's protocol, not through the remote shell
            "--inplace",  # write into .NAME.part itself: what arrived survives an interruption
            "--partial",
            "--ignore-times",  # a leftover .part is a basis for the delta, never trusted by size+mtime
            "--stats",
            f"--timeout={RSYNC_IO_TIMEOUT_S}",
            "-e",
            shlex.join(["ssh", *self.ssh_options]),  # rsync splits -e itself, honouring quotes
            "--",
            str(self.image),
            f"{self.t.rsync_host}:{self.t.part}",
        ]
        done = self.run(argv)
        if done.returncode != 0:
            if done.returncode == 20 or done.returncode < 0:  # SIGINT/SIGTERM, or killed
                hints = [f"the partial file {self.t.part} is kept for the next push to resume: push again"]
                self.fail("the transfer was interrupted", done, hints=hints)
            if re.search(r"rsync: (command )?not found", done.stderr) or done.returncode == 127:
                self.fail("rsync is not installed on the remote host", done)
            if _DISK_FULL.search(done.stderr):
                self.disk_full(done, size)
            self.fail_ssh(done, what="the transfer failed")
        return parse_rsync_stats(done.stdout)

    def scp(self, size: int) -> int:
        # Fallback when rsync is not installed here. Not resumable: scp rewrites the
        # temporary file from the start every time (it is still verified and renamed).
        # scp's legacy protocol passes the remote path through the remote shell, its SFTP
        # protocol (OpenSSH 9+) takes it literally: no quoting is right for both, so scp
        # only gets paths that need none.
        if not _SCP_SAFE.fullmatch(self.t.part):
            raise ShipError(
                f"rsync is not installed here, and scp cannot safely copy to {self.t.path!r} (spaces, quotes or other shell characters)",
                hints=["install rsync (it also resumes interrupted pushes), or choose a plain path"],
            )
        argv = ["scp", "-q", *scp_options(self.ssh_options), "--", str(self.image), f"{self.t.rsync_host}:{self.t.part}"]
        done = self.run(argv)
        if done.returncode != 0:
            if _DISK_FULL.search(done.stderr):
                self.disk_full(done, size)
            self.fail_ssh(done, what="the transfer failed")
        return self.image.stat().st_size

    def disk_full(self, done: Completed, size: int) -> NoReturn:
        """The transfer filled the remote disk (or quota): remove the partial file, and say so with its size.

        Removed, unlike after an interruption, where it is kept for the next push to resume:
        the destination is the folder every job of the project reads its image from, most
        often on the project's shared disk, and a hidden partial image of hundreds of MB keeps
        that disk full for every job writing checkpoints and logs there until someone finds
        it. Sending its bytes again costs a minute; a job that fails for space loses its
        allocation. And while the disk stays full, a resume would stop at the same place.
        """
        t = self.t
        quota = "quota" in done.stderr or "(122)" in done.stderr
        why = f"the disk quota for {t.directory} is exceeded" if quota else f"no space left on the device of {t.directory}"
        try:
            gone = self.run(self.ssh_argv(DISCARD_SCRIPT, t.part))
        except ShipError:
            gone = None
        if gone is not None and gone.returncode == 0:
            left = _tagged(gone.stdout).get("part")
            partial = f"the partial file {t.part} ({int(left):,} bytes) was removed" if left else f"no partial file was left at {t.part}"
        else:
            partial = f"the partial file {t.part} could not be removed; remove it by hand: ssh {t.host} rm -f {shlex.quote(t.part)}"
        hints = [f"make room for the image's {size:,} bytes there (the old image stays until the new one replaces it), then push again"]
        self.fail(f"{why}: {partial}", done, hints=hints)

    def write_sidecar(self, text: str, say: Callable[[str], None]) -> None:
        t = self.t
        done = self.run(self.ssh_argv(SIDECAR_SCRIPT, t.sidecar, t.sidecar_tmp, text))
        if done.returncode != 0 or "sidecar-failed" in _tagged(done.stdout):
            say(f"note: could not write {t.sidecar}; the next push over this image reads its own label instead")

    def commit(self, digest: str, image_changed: bool, mode: str, sidecar: str, say: Callable[[str], None]) -> None:
        t = self.t
        done = self.run(self.ssh_argv(COMMIT_SCRIPT, t.part, t.path, digest, mode, t.sidecar, t.sidecar_tmp, sidecar))
        if done.returncode == 95:
            remote = _tagged(done.stdout).get("sha256", "?")
            why = (
                "the image changed while it was being pushed"
                if image_changed
                else "the copy was corrupted on the way or on the remote disk"
            )
            raise ChecksumMismatch(
                f"push of {self.image} to {t.show()} failed: checksum mismatch, {why}",
                [f"local sha256 {digest}, remote {remote}", f"command: {shlex.join(done.argv)}"],
                [f"the partial copy {t.part} was removed and nothing was installed at {t.path}; push again"],
            )
        if done.returncode == 94:
            self.fail(f"cannot hash the transferred file {t.part} (is sha256sum installed there?)", done)
        if done.returncode == 96:
            self.fail(f"cannot move the verified image into place at {t.path}", done)
        if done.returncode == 97:
            self.fail(f"cannot set the mode of the transferred file {t.part}", done)
        if done.returncode != 0:
            self.fail_ssh(done)
        if "sidecar-failed" in _tagged(done.stdout):
            say(f"note: could not write {t.sidecar}; the next push over this image reads its own label instead")

    def run(self, argv: list[str]) -> Completed:
        try:
            return self.runner.run(argv)
        except FileNotFoundError:
            raise ShipError(f"push of {self.image} failed: `{argv[0]}` is not installed here") from None
        except subprocess.TimeoutExpired as exc:
            raise ShipError(
                f"push of {self.image} to {self.t.show()} failed: `{shlex.join(argv)}` timed out after {exc.timeout:g} s"
            ) from None

    def fail_ssh(self, done: Completed, what: str = "") -> NoReturn:
        err = done.stderr
        if _LOGIN_REFUSED.search(err) or "Too many authentication failures" in err or "Host key verification failed" in err:
            why = f"{self.t.host} refused the ssh login"
            hints = [f"check that `ssh {self.t.host}` works by hand (user, key: -i, options)"]
        elif done.returncode == 255 or "ssh: " in err or "Connection closed" in err or "connection unexpectedly closed" in err:
            why = f"cannot reach {self.t.host} over ssh"
            hints = ["check the host name and port (-p), and that `ssh HOST` works by hand"]
        else:
            why, hints = what or "a remote command failed", []
        self.fail(why, done, hints)

    def fail(self, why: str, done: Completed, hints: Sequence[str] = ()) -> NoReturn:
        output = [line for line in (done.stderr.strip() or done.stdout.strip()).splitlines() if not line.startswith(_TAG)][-8:]
        problems = [f"command (exit {done.returncode}): {shlex.join(done.argv)}", *output]
        nothing = f"nothing was installed at {self.t.path}"
        raise ShipError(f"push of {self.image} to {self.t.show()} failed: {why}", problems, [*hints, nothing])


def _tagged(stdout: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in stdout.splitlines():
        if line.startswith(_TAG):
            key, _, value = line[len(_TAG) :].strip().partition(" ")
            out[key] = value.strip()
    return out


def _head(stdout: str) -> bytes | None:
    """The bytes the probe printed with od between its ``head`` and ``end`` lines."""
    lines = stdout.splitlines()
    try:
        start, end = lines.index(f"{_TAG} head"), lines.index(f"{_TAG} end")
        return bytes.fromhex("".join(lines[start + 1 : end]))
    except ValueError:
        return None


def parse_rsync_stats(stdout: str) -> int:
    """New data rsync sent (``Literal data: 1,234 bytes``; digits in any locale's grouping)."""
    m = re.search(r"^Literal data:\s*([\d.,' ]+)", stdout, re.MULTILINE)
    if not m:
        m = re.search(r"^Total transferred file size:\s*([\d.,' ]+)", stdout, re.MULTILINE)
    return int(re.sub(r"\D", "", m.group(1)) or 0) if m else 0


# ssh's options that take a value (its getopt string), and which of ssh's options scp
# takes with the same meaning.
_SSH_WITH_VALUE = set("BbcDEeFIiJLlmOoPpQRSWw")
_SCP_SAME = set("cFiJo")
_SCP_FLAGS = set("46ACqv")


def scp_options(ssh_options: Sequence[str]) -> list[str]:
    """ssh's options as scp takes them: ``-p PORT`` is ``-P PORT``, ``-l USER`` is ``-o User=USER``."""
    out: list[str] = []
    it = iter(ssh_options)
    for word in it:
        if not word.startswith("-") or len(word) < 2:
            raise ShipError(f"ssh option {word!r} is not an option")
        flag = word[1]
        if flag in _SSH_WITH_VALUE:
            value = word[2:] or next(it, None)
            if value is None:
                raise ShipError(f"ssh option {word} needs a value")
            if flag == "p":
                out += ["-P", value]
            elif flag == "l":
                out += ["-o", f"User={value}"]
            elif flag in _SCP_SAME:
                out += [f"-{flag}", value]
            else:
                raise ShipError(f"scp cannot take the ssh option -{flag}", hints=["install rsync, or pass it as -o Name=value"])
        elif all(c in _SCP_FLAGS for c in word[1:]):
            out.append(word)
        else:
            raise ShipError(f"scp cannot take the ssh option {word}", hints=["install rsync, or pass it as -o Name=value"])
    return out


# --- a copy on this machine ---------------------------------------------------------------


def _copy_here(
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
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # removed, as a remote one (see _Session.disk_full)
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
