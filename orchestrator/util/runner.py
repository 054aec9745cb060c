"""Running commands: one small interface, argv lists only, never ``shell=True``.

Everything the orchestrator runs (bash, shellcheck, sbatch, sacct, apptainer,
and the detached child a local job is) goes through a :class:`Runner`, so tests
can inject a fake that records the argv instead of touching the system.

Long commands whose output a user should see as it comes (a container build) go
through :meth:`Runner.stream`; :func:`stop_signals` turns SIGINT, SIGTERM and SIGHUP
into :class:`Stopped`, so such a command is stopped, and its ``finally`` blocks run,
whichever way the process is asked to stop.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_S = 10.0  # how long a stopped command's process group has to clean up after SIGTERM, before SIGKILL


@dataclass(frozen=True)
class Completed:
    """A finished command. ``stdout`` and ``stderr`` are text for showing and parsing: UTF-8,
    each byte that is not UTF-8 replaced by U+FFFD (a cluster's tools, a file name or a job's
    output may hold any byte, and text with lone surrogates would fail again when printed).
    ``stdout_bytes`` is the output exactly as the command wrote it, for callers whose content
    must not change (a file read over ssh, a hash); None where a fake runner gave text only."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    stdout_bytes: bytes | None = None

    @property
    def data(self) -> bytes:
        """The output as bytes: as written where the runner kept them, else the text's UTF-8."""
        return self.stdout_bytes if self.stdout_bytes is not None else self.stdout.encode()


def decode(data: bytes) -> str:
    """Captured output as text to show: UTF-8 with undecodable bytes replaced, and line ends
    made ``\n`` as a text-mode pipe would."""
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")


class Process(Protocol):
    """A child process that outlives the call that started it (``subprocess.Popen`` is one)."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def terminate(self) -> None: ...


class Runner(Protocol):
    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None) -> Completed: ...

    def spawn(self, argv: Sequence[str], cwd: Path | None = None) -> Process: ...

    def which(self, name: str) -> str | None: ...

    def stream(
        self,
        argv: Sequence[str],
        on_line: Callable[[str], None],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        on_start: Callable[[int], None] | None = None,
    ) -> int: ...


class Stopped(BaseException):
    """SIGINT, SIGTERM or SIGHUP arrived (see :func:`stop_signals`). A BaseException, like
    KeyboardInterrupt, so that only code that means to (cleanup, then re-raise) catches it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.reported = False  # set by whoever told the user what the stop did, so it is said once

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 130, 143, 129."""
        return 128 + self.signum


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """While inside, the first SIGINT, SIGTERM or SIGHUP raises :class:`Stopped` in the main
    thread. Later ones are ignored: a second Ctrl-C or a `timeout` that signals again must
    not cut short the cleanup the first one started. The previous handlers come back on exit."""
    seen: list[int] = []

    def handler(signum, frame):
        if not seen:
            seen.append(signum)
            raise Stopped(signum)

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class SubprocessRunner:
    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None) -> Completed:
        # Bytes, decoded here by one rule (see Completed): a text-mode pipe raises on the first byte that is not UTF-8.
        data = None if input is None else input.encode("utf-8", errors="surrogateescape")
        proc = subprocess.run(list(argv), input=data, capture_output=True, timeout=timeout, check=False)
        return Completed(tuple(argv), proc.returncode, decode(proc.stdout), decode(proc.stderr), proc.stdout)

    def spawn(self, argv: Sequence[str], cwd: Path | None = None) -> Process:
        # Output is not captured: the child writes to our stdout and stderr, which
        # is where `dvc repro` shows a stage's output.
        return subprocess.Popen(list(argv), cwd=cwd)

    def which(self, name: str) -> str | None:
        return shutil.which(name)

    def stream(
        self,
        argv: Sequence[str],
        on_line: Callable[[str], None],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        on_start: Callable[[int], None] | None = None,
    ) -> int:
        """Run ``argv`` with stdout and stderr merged, handing each line (without its line
        end) to ``on_line`` as it comes; its exit status. ``env`` is set in the child on top
        of ours; ``on_start`` gets the child's pid (also its process group's id) once started.

        The child runs in a session of its own: a terminal's Ctrl-C or hang-up reaches only
        us, and we stop the child's whole process group (the runtime and whatever it started)
        when the time is up (then ``subprocess.TimeoutExpired``) or anything, such as
        :class:`Stopped`, interrupts the wait: SIGTERM first, so it can clean up after itself,
        SIGKILL after :data:`GRACE_S`."""
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env} if env else None,
            start_new_session=True,
        )
        assert proc.stdout is not None
        lines = _Lines(proc.stdout.fileno(), on_line)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            if on_start is not None:
                on_start(proc.pid)
            # Until the pipe closes, or the child has ended and the pipe is quiet (a grandchild
            # it left running may hold the pipe open), then until the child has ended.
            while not lines.eof or not _exited(proc):
                if deadline is not None and time.monotonic() >= deadline:
                    _stop_group(proc, lines)
                    raise subprocess.TimeoutExpired(list(argv), timeout or 0)
                wait = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
                if lines.eof:
                    time.sleep(min(wait, 0.05))
                elif not lines.read(wait) and _exited(proc):
                    break
            lines.flush()
            return proc.wait()
        except BaseException:
            _stop_group(proc, lines)
            raise
        finally:
            proc.stdout.close()


class _Lines:
    """A pipe read without blocking for longer than asked, cut into lines (bytes decoded as UTF-8)."""

    def __init__(self, fd: int, on_line: Callable[[str], None]) -> None:
        self.fd, self.on_line, self.eof, self.rest = fd, on_line, False, ""
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.selector = selectors.DefaultSelector()
        self.selector.register(fd, selectors.EVENT_READ)

    def read(self, wait: float) -> bool:
        """Hand on what arrives within ``wait`` seconds; whether anything did (False at the
        pipe's end too, which sets ``eof``)."""
        if self.eof or not self.selector.select(max(wait, 0.0)):
            return False
        data = os.read(self.fd, 65536)
        if not data:
            self.eof = True
            self.selector.close()
            return False
        *done, self.rest = (self.rest + self.decoder.decode(data)).split("\n")
        for line in done:
            self.on_line(line.rstrip("\r"))
        return True

    def flush(self) -> None:
        if self.rest:
            self.on_line(self.rest.rstrip("\r"))
            self.rest = ""


def _exited(proc: subprocess.Popen) -> bool:
    """Whether the child has ended, without reaping it: while it is an unreaped zombie its
    pid, which is also its process group's id, cannot be reused, so killpg stays safe."""
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped already
        return True


def _stop_group(proc: subprocess.Popen, lines: _Lines) -> None:
    """SIGTERM to the child's process group, its output still handed on while it cleans up,
    SIGKILL to what is left of the group after GRACE_S, then reap the child."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while not _exited(proc) and time.monotonic() < deadline:
        if not lines.read(0.2):
            time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the group (the child itself is unreaped: the id is still its)
    proc.wait()
    while lines.read(0):  # what the group wrote before it ended
        pass
    lines.flush()
