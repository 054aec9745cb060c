"""The remote steps of a push: ssh, rsync or scp to ``host:path``, through the ssh transport.

Every ssh, rsync and scp of a push goes through :class:`orchestrator.util.ssh.Transport`:
the caller's ssh options first, then the transport's (one master connection per host,
shared with the remote commands, so a login that prompts is asked for once; timeouts).
The steps (probe, transfer, verify and commit) and why they are so:
:mod:`~orchestrator.containers.push`.

Remote commands: each is a constant one-line POSIX sh script run as
``sh -c SCRIPT sh ARG...``, and every word of that line is ``shlex.quote``d. ssh joins
its arguments with spaces and the remote login shell parses the result, so an unquoted
path with a space, a quote or ``$(...)`` would be split or executed there; here values
reach the script only as positional parameters. One line, single quotes, no
``$'...'``: csh and tcsh login shells parse it the same way as sh and bash. rsync gets
the remote path with ``-s`` (``--protect-args``/``--secluded-args``), which sends it
over rsync's protocol instead of through the remote shell, on old rsyncs too.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NoReturn

from orchestrator.containers.identity import HEAD_BYTES, Identity, sidecar_identity, sidecar_text, sif_identity
from orchestrator.containers.push_target import ChecksumMismatch, PushResult, ShipError, Target, guard
from orchestrator.util import ssh
from orchestrator.util.runner import Completed, Runner

RSYNC_IO_TIMEOUT_S = 300
_TAG = "orchestrator-ship:"  # marks our lines in remote output (a noisy .bashrc may print too)
# What ssh itself says when it fails, also where rsync or scp exit with their own code; a
# file's "Permission denied (13)" is not a refused login.
_SSH_SAID = re.compile(
    r"ssh: |Permission denied \([a-z,-]+\)|Too many authentication failures|Host key verification failed|"
    r"Connection closed|connection unexpectedly closed"
)
# Paths scp can take as they are, in both its protocols (see _Session.scp).
_SCP_SAFE = re.compile(r"[A-Za-z0-9._/+%=,:@-]+")

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


def push_remote(
    image: Path,
    t: Target,
    target: str,
    runner: Runner,
    transport: ssh.Transport,
    digest: str,
    before: os.stat_result,
    ours: Identity,
    replace: bool,
    say: Callable[[str], None],
) -> PushResult:
    """The push of :func:`orchestrator.containers.push.push` to a remote ``t``."""
    ssh.make_control_folder()
    s = _Session(image, t, target, runner, transport)
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

    def __init__(self, image: Path, t: Target, target: str, runner: Runner, transport: ssh.Transport) -> None:
        self.image, self.t, self.target, self.runner, self.transport = image, t, target, runner, transport

    def ssh_argv(self, script: str, *args: str) -> list[str]:
        # "--": the host can never be taken for an option; the command is ONE string,
        # every word quoted, because the remote shell parses it.
        return self.transport.argv(str(self.t.host), shlex.join(["sh", "-c", script, "sh", *args]))

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
            self.transport.command_line(),  # rsync splits -e itself, honouring quotes
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
        ssh_word, *ssh_args = self.transport.words  # scp takes another ssh program alone, its options as its own
        program = ["-S", ssh_word] if ssh_word != "ssh" else []
        options = scp_options([*ssh_args, *self.transport.options()])
        argv = ["scp", "-q", *program, *options, "--", str(self.image), f"{self.t.rsync_host}:{self.t.part}"]
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
        """ssh failed (classified as the transport does, :func:`orchestrator.util.ssh.classify`), or the command did."""
        host = str(self.t.host)
        if done.returncode != 255 and not _SSH_SAID.search(done.stderr):
            self.fail(what or "a remote command failed", done)
        error, _ = ssh.classify(host, done.stderr, named_in="the push target (the profile's container.push_host)")
        if isinstance(error, ssh.LoginRefused):
            why = f"{host} refused the ssh login"
        elif isinstance(error, ssh.HostKeyMismatch):
            why = error.headline
        else:
            why = f"cannot reach {host} over ssh"
        self.fail(why, done, error.hints)

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
