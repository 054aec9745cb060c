"""Test doubles at the subprocess boundary: a runner that records argv and answers
from canned Slurm output (captured from the testbed), and starts fake child processes."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.util.runner import Completed

Answer = Completed | Callable[[Sequence[str]], Completed]


def ok(stdout: str = "", stderr: str = "", rc: int = 0) -> Callable[[Sequence[str]], Completed]:
    return lambda argv: Completed(tuple(argv), rc, stdout, stderr)


@dataclass
class FakeProcess:
    """A child started through :meth:`FakeRunner.spawn`: finished with ``returncode``,
    or running while a test holds it at None."""

    argv: tuple[str, ...]
    cwd: Path | None
    pid: int
    returncode: int | None = 0
    terminated: bool = False

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            raise subprocess.TimeoutExpired(list(self.argv), timeout or 0)
        return self.returncode

    def terminate(self) -> None:
        self.terminated = True
        if self.returncode is None:
            self.returncode = -15  # as Popen reports SIGTERM


@dataclass
class FakeRunner:
    """Answers by command name; every call (run or spawn) is recorded in ``calls``,
    every started child in ``spawned``."""

    answers: dict[str, Answer] = field(default_factory=dict)
    installed: set[str] = field(default_factory=lambda: {"sbatch", "sacct", "squeue", "scontrol", "sacctmgr", "scancel"})
    calls: list[list[str]] = field(default_factory=list)
    spawned: list[FakeProcess] = field(default_factory=list)
    exit_codes: dict[str, int | None] = field(default_factory=dict)  # a spawned child's, by command name (0 if not named)

    def run(self, argv, *, input=None, timeout=None):
        self.calls.append(list(argv))
        answer = self.answers.get(argv[0])
        if answer is None:
            raise FileNotFoundError(argv[0])
        return answer(argv) if callable(answer) else answer

    def spawn(self, argv, cwd=None):
        self.calls.append(list(argv))
        child = FakeProcess(tuple(argv), cwd, 40000 + len(self.spawned), self.exit_codes.get(argv[0], 0))
        self.spawned.append(child)
        return child

    def which(self, name):
        return f"/usr/bin/{name}" if name in self.installed else None

    def called(self, name: str) -> list[list[str]]:
        return [c for c in self.calls if c[0] == name]
