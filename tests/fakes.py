"""Test doubles at the subprocess boundary: a runner that records argv and answers
from canned Slurm output (captured from the testbed)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from orchestrator.util.runner import Completed

Answer = Completed | Callable[[Sequence[str]], Completed]


def ok(stdout: str = "", stderr: str = "", rc: int = 0) -> Callable[[Sequence[str]], Completed]:
    return lambda argv: Completed(tuple(argv), rc, stdout, stderr)


@dataclass
class FakeRunner:
    """Answers by command name; every call is recorded in ``calls``."""

    answers: dict[str, Answer] = field(default_factory=dict)
    installed: set[str] = field(default_factory=lambda: {"sbatch", "sacct", "squeue", "scontrol", "sacctmgr", "scancel"})
    calls: list[list[str]] = field(default_factory=list)

    def run(self, argv, *, input=None, timeout=None):
        self.calls.append(list(argv))
        answer = self.answers.get(argv[0])
        if answer is None:
            raise FileNotFoundError(argv[0])
        return answer(argv) if callable(answer) else answer

    def which(self, name):
        return f"/usr/bin/{name}" if name in self.installed else None

    def called(self, name: str) -> list[list[str]]:
        return [c for c in self.calls if c[0] == name]
