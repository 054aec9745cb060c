"""One SSH connection to a login node: the transport of :mod:`orchestrator.util.ssh`, retried.

The ssh command, its options (one master connection per destination, shared with the image
push, so a two-factor login is asked for once), ``ORCHESTRATOR_SSH`` and the classification
of a failed ssh are the transport's. Here: a session's connection to one host, its one
login that may prompt (:meth:`Connection.connect`), and the retries: a connection that
dropped (closed, reset, a master that went away) is retried :data:`RETRIES` times with a
doubling backoff; the same for "refused" and "timed out" once this session has been
connected (a login node rebooting).
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.util.runner import Completed, Runner
from orchestrator.util.ssh import (
    RemoteError,
    Transport,
    Unreachable,
    classify,
    make_control_folder,
)

RETRIES = 3
BACKOFF_S = 2.0


Streamer = Callable[[Sequence[str], Callable[[bytes], None]], Completed]


@dataclass
class Connection:
    """ssh to ``host`` as this session does it; :meth:`connect` first."""

    host: str
    runner: Runner
    ssh: tuple[str, ...] = ("ssh",)
    interactive: bool = False
    sleep: Callable[[float], None] = time.sleep
    backoff_s: float = BACKOFF_S
    connected: bool = False
    streamer: Streamer | None = field(default=None, repr=False)  # tests replace the pipe reader

    @classmethod
    def to(cls, host: str, runner: Runner, environ: Mapping[str, str] | None = None, interactive: bool | None = None) -> Connection:
        transport = Transport.here(environ, interactive)
        return cls(host, runner, transport.words, transport.interactive)

    @property
    def transport(self) -> Transport:
        return Transport(self.ssh, self.interactive)

    def base(self) -> list[str]:
        """ssh and its options, without the destination: also git's core.sshCommand and rsync's -e."""
        return self.transport.base()

    def argv(self, command: str) -> list[str]:
        return self.transport.argv(self.host, command)

    def connect(self) -> None:
        """Log in (or find the master of an earlier call alive): the one login that may prompt."""
        if self.runner.which(self.ssh[0]) is None:
            raise RemoteError(
                f"`{self.ssh[0]}` is not installed here: --remote runs the job commands over ssh", hints=["install openssh-client"]
            )
        make_control_folder()
        # A prompt (password, one-time code) waits for the user; without a terminal none can come.
        self.run("true", timeout=None if self.interactive else 120)
        self.connected = True

    def run(self, command: str, *, input: str | None = None, timeout: float | None = None, retry: bool = True) -> Completed:
        """``command`` (one line the remote login shell parses) there; its result, or the
        classified :class:`RemoteError` when ssh itself failed (after the retries)."""
        attempt = 0
        while True:
            try:
                done = self.runner.run(self.argv(command), input=input, timeout=timeout)
            except subprocess.TimeoutExpired:
                raise Unreachable(f"ssh to {self.host} did not finish within {timeout:g} s", hints=[f"`ssh {self.host}` by hand"]) from None
            if done.returncode != 255:
                return done
            error, again = classify(self.host, done.stderr, self.connected)
            if not (retry and again) or attempt >= RETRIES:
                if attempt:
                    error.problems = (*error.problems, f"tried {attempt + 1} times, {self.backoff_s:g} s apart and doubling")
                raise error
            self.sleep(self.backoff_s * 2**attempt)
            attempt += 1

    def stream(self, command: str, on_stdout: Callable[[bytes], None]) -> Completed:
        """``command`` there, its stdout handed on as it comes (bytes), its stderr kept: one
        attempt, for the caller to resume from what arrived (see session.follow)."""
        return (self.streamer or _stream)(self.argv(command), on_stdout)

    def backoff(self, attempt: int) -> None:
        self.sleep(self.backoff_s * 2**attempt)


def _stream(argv: Sequence[str], on_stdout: Callable[[bytes], None]) -> Completed:
    """Run ``argv`` with stdout handed on in chunks and stderr collected; stopped when interrupted.

    ssh stays in our process group: a terminal's Ctrl-C reaches it as it reaches us, and
    ends only the connection (the remote command was started detached)."""
    proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    err = bytearray()
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    sel.register(proc.stderr, selectors.EVENT_READ)
    try:
        open_pipes = 2
        while open_pipes:
            for key, _ in sel.select():
                data = os.read(key.fd, 65536)
                if not data:
                    sel.unregister(key.fileobj)
                    open_pipes -= 1
                elif key.fileobj is proc.stdout:
                    on_stdout(data)
                else:
                    err += data
        return Completed(tuple(argv), proc.wait(), "", err.decode(errors="replace"))
    finally:
        sel.close()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.stdout.close()
        proc.stderr.close()
