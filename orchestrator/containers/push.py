"""Shipping a built container image to where the jobs read it: rsync over ssh, verified, atomic.

``push(image, "user@host:/project/x/containers/orchestrator.sif", runner)`` makes the file
at the remote path byte-identical to the local image, or raises :class:`ShipError` and
leaves whatever was at that path before untouched. A push is three steps, each one ssh
connection (jobs only ever open the final path):

1. probe: create the remote directory; if a file of the image's size is already at the
   final path, its sha256. Equal to the local sha256: nothing to do, nothing transferred
   (``PushResult.transferred`` is False).
2. transfer to a hidden temporary name beside the final one, ``.NAME.part``, with
   ``rsync --inplace`` (which keeps what arrived when it is interrupted): the next push
   uses that file as the basis of rsync's delta transfer, so only what is missing
   crosses the network again. ``--ignore-times``: never trust a leftover's size and
   mtime, always let the checksums decide.
3. verify and commit: the sha256 of ``.NAME.part``, computed on the remote host, must
   equal the local one; then ``mv -f`` renames it over the final path, an atomic
   rename within one directory. Jobs that have the old image open keep reading the old
   file. On a mismatch the temporary file is removed and :class:`ChecksumMismatch`
   raised; the final path is not touched.

Remote commands: each is a constant one-line POSIX sh script run as
``sh -c SCRIPT sh ARG...``, and every word of that line is ``shlex.quote``d. ssh joins
its arguments with spaces and the remote login shell parses the result, so an unquoted
path with a space, a quote or ``$(...)`` would be split or executed there; here values
reach the script only as positional parameters. One line, single quotes, no
``$'...'``: csh and tcsh login shells parse it the same way as sh and bash. rsync gets
the remote path with ``-s`` (``--protect-args``/``--secluded-args``), which sends it
over rsync's protocol instead of through the remote shell, on old rsyncs too.

The local image's sha256 is computed once, streaming, and cached beside the image in
``.NAME.sha256`` keyed by size and mtime, so pushing a big image again (the usual case:
nothing changed) costs one remote hash and no local one.

A target without ``host:`` is a path on this machine: the image is copied there with
the same temporary name, verification and rename, in Python.
"""

from __future__ import annotations

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
    return image.with_name(f".{image.name}.sha256")


def local_sha256(image: Path) -> str:
    """The image's sha256, from the cache beside it when its size and mtime still match."""
    image = Path(image)
    st = _stat_image(image)
    key = f"{st.st_size} {st.st_mtime_ns}"
    cache = cache_path(image)
    try:
        digest, cached_key = cache.read_text().split(" ", 1)
        if cached_key.strip() == key and re.fullmatch(r"[0-9a-f]{64}", digest):
            return digest
    except (OSError, ValueError):
        pass
    try:
        digest = sha256_file(image)
    except OSError as exc:
        raise ShipError(f"cannot read the image {image}: {exc.strerror or exc}") from exc
    after = image.stat()
    if (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns):  # not being written meanwhile
        try:
            files.atomic_write(cache, f"{digest} {key}\n")
        except OSError:
            pass  # a read-only image folder: no cache, hash every time
    return digest


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


# --- push ---------------------------------------------------------------------------------

# ssh options added after the caller's (ssh takes the first value of each option, so the
# caller's win): fail fast on a dead host, notice a dead connection during a long hash.
DEFAULT_SSH_OPTIONS = ("-o", "ConnectTimeout=20", "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4")
RSYNC_IO_TIMEOUT_S = 300
_TAG = "orchestrator-ship:"  # marks our lines in remote output (a noisy .bashrc may print too)
_LOGIN_REFUSED = re.compile(r"Permission denied \([a-z,-]+\)\.")  # ssh's, not a file's "Permission denied (13)"

# $1 dir, $2 final, $3 part, $4 local size. Exit codes are ours (mapped in _Session.probe).
PROBE_SCRIPT = (
    'mkdir -p -- "$1" || exit 90; '
    '[ -d "$2" ] && exit 91; '
    'if [ -f "$2" ]; then s=$(wc -c < "$2") || exit 92; echo "' + _TAG + ' final $s"; '
    'if [ $s -eq "$4" ]; then h=$(sha256sum < "$2") || exit 92; echo "' + _TAG + ' sha256 ${h%% *}"; fi; fi; '
    'if [ -f "$3" ]; then echo "' + _TAG + ' part $(wc -c < "$3")"; fi; '
    '[ -w "$1" ] || echo "' + _TAG + ' readonly 1"'
)
# $1 part, $2 final, $3 expected sha256.
COMMIT_SCRIPT = (
    'h=$(sha256sum < "$1") || exit 94; h=${h%% *}; echo "' + _TAG + ' sha256 $h"; '
    'if [ "$h" != "$3" ]; then rm -f -- "$1"; exit 95; fi; '
    'mv -f -- "$1" "$2" || exit 96'
)


def push(
    image: Path,
    target: str,
    runner: Runner,
    *,
    ssh_options: Sequence[str] = (),
    say: Callable[[str], None] | None = None,
) -> PushResult:
    """Make ``target`` (``[user@]host:/dir/name.sif`` or a local path) hold exactly ``image``.

    ``ssh_options`` are ssh's own (``-p 2222``, ``-i KEY``, ``-o Name=value``, ``-J jump``);
    they are given to every ssh, rsync and scp this runs. Raises :class:`ShipError`.
    """
    image = Path(image).absolute()  # a path with ':' before any '/' would be a host to rsync
    t = parse_target(target)
    if isinstance(ssh_options, str):
        raise TypeError("ssh_options is a sequence of words, e.g. ['-p', '2222']")
    say = say or (lambda _: None)
    before = _stat_image(image)
    digest = local_sha256(image)
    if t.host is None:
        return _copy_here(image, t, target, digest, before.st_size, say)

    s = _Session(image, t, target, runner, [*ssh_options, *DEFAULT_SSH_OPTIONS])
    final_sha, part_size = s.probe(before.st_size)
    if final_sha == digest:
        say(f"{t.show()} is already this image (sha256 {digest[:12]}); nothing to push")
        return PushResult(target, t.host, t.path, digest, before.st_size, False, 0, "skip")
    if s.readonly:
        s.fail(f"the remote directory {t.directory} is not writable", s.probed)
    rsync = runner.which("rsync")
    method: Literal["rsync", "scp"] = "rsync" if rsync else "scp"
    resumed = f", resuming from {part_size:,} bytes already there" if part_size and method == "rsync" else ""
    say(f"pushing {image} ({before.st_size:,} bytes) to {t.show()} with {method}{resumed}")
    sent = s.rsync() if rsync else s.scp()
    after = image.stat()
    changed = (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns)
    s.commit(digest, changed)
    say(f"{t.show()}: sha256 {digest[:12]} verified")
    return PushResult(target, t.host, t.path, digest, before.st_size, True, sent, method, part_size if method == "rsync" else 0)


class _Session:
    """The remote steps of one push; every failure becomes a ShipError naming its command."""

    def __init__(self, image: Path, t: Target, target: str, runner: Runner, ssh_options: list[str]) -> None:
        self.image, self.t, self.target, self.runner, self.ssh_options = image, t, target, runner, ssh_options

    def ssh_argv(self, script: str, *args: str) -> list[str]:
        # "--": the host can never be taken for an option; the command is ONE string,
        # every word quoted, because the remote shell parses it.
        return ["ssh", *self.ssh_options, "--", str(self.t.host), shlex.join(["sh", "-c", script, "sh", *args])]

    def probe(self, size: int) -> tuple[str | None, int]:
        """(sha256 of the file at the final path if its size is the image's, size of a leftover .part)."""
        t = self.t
        done = self.run(self.ssh_argv(PROBE_SCRIPT, t.directory, t.path, t.part, str(size)))
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
        self.readonly = "readonly" in tagged
        return tagged.get("sha256"), int(tagged.get("part", "0") or 0)

    def rsync(self) -> int:
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
                self.fail("the transfer was interrupted", done, hints=["push again: it resumes from what arrived"])
            if re.search(r"rsync: (command )?not found", done.stderr) or done.returncode == 127:
                self.fail("rsync is not installed on the remote host", done)
            self.fail_ssh(done, what="the transfer failed")
        return parse_rsync_stats(done.stdout)

    def scp(self) -> int:
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
            self.fail_ssh(done, what="the transfer failed")
        return self.image.stat().st_size

    def commit(self, digest: str, image_changed: bool) -> None:
        t = self.t
        done = self.run(self.ssh_argv(COMMIT_SCRIPT, t.part, t.path, digest))
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
        if done.returncode != 0:
            self.fail_ssh(done)

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


def _copy_here(image: Path, t: Target, target: str, digest: str, size: int, say: Callable[[str], None]) -> PushResult:
    dest = Path(t.path)
    part = Path(t.part)

    def fail(why: str, exc: OSError) -> ShipError:
        return ShipError(f"copy of {image} to {dest} failed: {why}: {exc.strerror or exc}", hints=[f"nothing was installed at {dest}"])

    try:
        if dest.is_file() and dest.stat().st_size == size and sha256_file(dest) == digest:
            say(f"{dest} is already this image (sha256 {digest[:12]}); nothing to copy")
            return PushResult(target, None, str(dest), digest, size, False, 0, "skip")
    except OSError as exc:
        raise fail(f"cannot read {dest}", exc) from exc
    say(f"copying {image} ({size:,} bytes) to {dest}")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(image, part)
        got = sha256_file(part)
    except OSError as exc:
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
    return PushResult(target, None, str(dest), digest, size, True, size, "copy")


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
