"""The ssh transport: how every ssh of the orchestrator starts, and what its failures mean.

Used by the remote commands (:mod:`orchestrator.remote.connection`) and by the image push
(:mod:`orchestrator.containers.push`, also through rsync's ``-e`` and scp), so both ride on
one master connection to a host and a two-factor login is asked for once.

Why the system ``ssh`` and not a Python SSH library: the user's ``~/.ssh/config`` (host
aliases, ``User``, ``ProxyJump``, ``IdentityFile``), the agent, hardware keys and the
site's two-factor prompts all work as they do for a plain ``ssh HOST``, because it IS a
plain ``ssh HOST``; the destination is passed as written, so an alias resolves there.

Every ssh gets, after the caller's own options (ssh takes the first value of an option,
and command-line options win over the config file's, so the caller's hold over ours):

- ``ControlMaster=auto``, ``ControlPath=~/.ssh/orchestrator-%C``, ``ControlPersist=10m``:
  the first call logs in and leaves a master connection behind; every later ssh (and
  ``git push``, rsync and scp, which are given the same command) rides on it for ten idle
  minutes, so a session asks for a password or a one-time code once and each further
  call costs one round trip. ``%C`` is a hash of host, port and user: short enough for
  the 104-byte limit on a socket's path, one master per destination.
- ``ConnectTimeout`` and ``ServerAlive*``: a dead host fails in seconds, a dead
  connection is noticed within a minute instead of hanging.
- ``BatchMode=yes`` only where there is no terminal (CI, a pipe): a prompt nobody can
  answer fails at once. With a terminal, ssh asks on it (``/dev/tty``, also when our
  pipes capture its output), the master's login being the one that asks.

``ORCHESTRATOR_SSH`` replaces the ``ssh`` word (split like a shell would): another
binary, or ``ssh -F FILE`` for a config file of its own (ssh reads ``~/.ssh/config``
from the password database's home, not ``$HOME``, so this is the way to point it
elsewhere; the tests do).

A failed ssh (exit 255) is classified (:func:`classify`) into one :class:`RemoteError`
each: the host cannot be reached (the name does not resolve, refused, timed out), its
host key is not the one known, the login was refused, the connection dropped; with
whether trying again may help.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from orchestrator.errors import OrchestratorError

SSH_ENV = "ORCHESTRATOR_SSH"
CONTROL_PATH = "~/.ssh/orchestrator-%C"
PERSIST = "10m"
CONNECT_TIMEOUT_S = 20


class RemoteError(OrchestratorError):
    """Something about the login node or the way to it that the user fixes (host, key, login, install)."""


class Unreachable(RemoteError):
    """The host name does not resolve, or nothing answers at it (refused, timed out)."""


class HostKeyMismatch(RemoteError):
    """The host's key is not the one known_hosts has for it (changed, or never seen)."""


class LoginRefused(RemoteError):
    """The host answered but refused the login (key, user, second factor)."""


class ConnectionLost(RemoteError):
    """The connection dropped and did not come back after the retries; what ran there may go on."""

    exit_code = 1


_RESOLVE = re.compile(r"Could not resolve hostname|Name or service not known|nodename nor servname|Temporary failure in name resolution")
_NO_ANSWER = re.compile(r"Connection refused|Connection timed out|Operation timed out|No route to host|Network is unreachable")
_KEY_CHANGED = re.compile(r"REMOTE HOST IDENTIFICATION HAS CHANGED|Host key for .* has changed")
_REMOVE_WITH = re.compile(r"remove with:\s*\n?\s*(ssh-keygen [^\n]*)")  # ssh's own advice names the file and the entry
_KEY_UNKNOWN = re.compile(r"Host key verification failed|No [A-Z0-9-]+ host key is known")
_REFUSED = re.compile(
    r"Permission denied \([a-z,-]+\)|Too many authentication failures|Authentication failed|no more authentication methods"
)
_DROPPED = re.compile(
    r"Connection closed|Connection reset|closed by remote host|Broken pipe|kex_exchange_identification|"
    r"mux_client|Control socket connect|master .* (?:exited|died)|client_loop: send disconnect|Timeout, server .* not responding"
)


LOGIN_HOST_SETTING = "the profile's login.host or params.yaml's orchestrator.login_host"


@dataclass(frozen=True)
class _Failure:
    """One kind of failed ssh: the stderr that marks it, the error it is, and what to tell the user.
    The texts are format strings over :func:`classify`'s fields (host, named_in, forget, why)."""

    marks: re.Pattern[str]
    error: type[RemoteError]
    headline: str
    hints: tuple[str, ...]
    again: Literal["never", "once connected", "always"]  # whether trying again may help


_CHECK = "check that `ssh {host}` works by hand"
# First match wins: a key problem says more than the refusal that follows it.
_FAILURES = (
    _Failure(
        _KEY_CHANGED,
        HostKeyMismatch,
        "the host key of {host} is NOT the one your known_hosts has for it: nothing was sent",
        (
            "someone may be intercepting the connection, or the site replaced its keys: compare with the key "
            "fingerprints the site publishes",
            "if the site announced new keys: {forget}, then `ssh {host}` once to accept the new one",
        ),
        "never",
    ),
    _Failure(
        _KEY_UNKNOWN,
        HostKeyMismatch,
        "the host key of {host} could not be verified (not in your known_hosts, or not the one there): nothing was sent",
        ("run `ssh {host}` once in a terminal and accept the key after comparing it with the fingerprints the site publishes",),
        "never",
    ),
    _Failure(
        _REFUSED,
        LoginRefused,
        "{host} refused the login: nothing was sent",
        (_CHECK + ": user name (User in ~/.ssh/config, or user@host), key (IdentityFile, ssh-add), second factor",),
        "never",
    ),
    _Failure(
        _RESOLVE,
        Unreachable,
        "cannot reach {host}: the name does not resolve",
        ("check the spelling of {named_in}, and your ~/.ssh/config alias",),
        "never",
    ),
    _Failure(
        _NO_ANSWER,
        Unreachable,
        "cannot reach {host}: {why}",
        (_CHECK + ": host name, port (Port in ~/.ssh/config), VPN or ProxyJump the site needs",),
        "once connected",
    ),
    _Failure(_DROPPED, ConnectionLost, "the connection to {host} dropped", (_CHECK,), "always"),
)
# Nothing said at all: a connection that went away.
_SILENT = _FAILURES[-1]
_OTHER = _Failure(re.compile(""), RemoteError, "ssh to {host} failed (exit 255)", (_CHECK,), "never")


def classify(host: str, stderr: str, connected: bool = False, named_in: str = LOGIN_HOST_SETTING) -> tuple[RemoteError, bool]:
    """What an ssh that exited 255 with ``stderr`` means: the error to raise, and whether
    trying again may help (a dropped connection; no answer, once we had one). ``named_in``:
    where the user wrote ``host``, for the hint when the name does not resolve.

    Pure, so the classification is tested on the texts ssh prints."""
    lines = [line for line in stderr.strip().splitlines() if line.strip() and not line.startswith(("@@@", "Warning: Permanently"))]
    said = lines[-6:]
    found = next((f for f in _FAILURES if f.marks.search(stderr)), _OTHER if said else _SILENT)
    remove = _REMOVE_WITH.search(stderr)
    fields = {
        "host": host,
        "named_in": named_in,
        "forget": remove.group(1).strip() if remove else f"ssh-keygen -R {_bare(host)}",
        "why": "the connection was refused" if "refused" in stderr else "no answer (timed out)",
    }
    again = found.again == "always" or (found.again == "once connected" and connected)
    return found.error(found.headline.format(**fields), said, [h.format(**fields) for h in found.hints]), again


def _bare(host: str) -> str:
    return host.rpartition("@")[2]


def ssh_words(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The ssh command: ``ORCHESTRATOR_SSH`` split as a shell would, else ``ssh``."""
    text = environ.get(SSH_ENV, "").strip()
    if not text:
        return ("ssh",)
    try:
        words = tuple(shlex.split(text))
    except ValueError as exc:
        raise RemoteError(
            f"{SSH_ENV}={text!r} cannot be split into words: {exc}", hints=["e.g. ORCHESTRATOR_SSH='ssh -F ~/.ssh/x'"]
        ) from None
    return words


def options(interactive: bool) -> list[str]:
    """The options every ssh gets (see the module's docstring)."""
    found = [
        "-o", "ControlMaster=auto", "-o", f"ControlPath={CONTROL_PATH}", "-o", f"ControlPersist={PERSIST}",
        "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}", "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4",
    ]  # fmt: skip
    if not interactive:
        found += ["-o", "BatchMode=yes"]
    return found


@dataclass(frozen=True)
class Transport:
    """How an ssh starts: the ssh command (``ORCHESTRATOR_SSH``), the caller's own options, ours."""

    words: tuple[str, ...] = ("ssh",)
    interactive: bool = False
    extra: tuple[str, ...] = ()  # the caller's ssh options (``-p 2222``, ``-i KEY``): before ours, so they win

    @classmethod
    def here(cls, environ: Mapping[str, str] | None = None, interactive: bool | None = None, extra: Sequence[str] = ()) -> Transport:
        """This process's transport: ``ORCHESTRATOR_SSH`` from ``environ``, a prompt only with a terminal on stdin."""
        environ = os.environ if environ is None else environ
        if interactive is None:
            interactive = sys.stdin.isatty()
        return cls(ssh_words(environ), interactive, tuple(extra))

    def options(self) -> list[str]:
        """The options after the ssh command: the caller's, then ours."""
        return [*self.extra, *options(self.interactive)]

    def base(self) -> list[str]:
        """ssh and its options, without the destination: also rsync's ``-e`` and git's ``core.sshCommand``."""
        return [*self.words, *self.options()]

    def argv(self, host: str, command: str) -> list[str]:
        """ssh running ``command`` (one line the remote login shell parses) on ``host``; ``--``: never an option."""
        return [*self.base(), "--", host, command]

    def command_line(self) -> str:
        """:meth:`base` as one string, for the tools that split an ssh command themselves (rsync ``-e``, git)."""
        return shlex.join(self.base())


def make_control_folder() -> None:
    """The folder of :data:`CONTROL_PATH`: ssh makes none for a ControlPath.

    ssh expands ``~`` from the password database, not ``$HOME``: so is the folder found here."""
    try:
        home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:  # a uid without an entry (a container): ssh falls back to $HOME as well
        home = Path.home()
    (home / ".ssh").mkdir(mode=0o700, exist_ok=True)
