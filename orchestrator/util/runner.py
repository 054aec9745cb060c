"""Running commands: one small interface, argv lists only, never ``shell=True``.

Everything the orchestrator runs (bash, shellcheck, sbatch, sacct, apptainer,
and the detached child a local job is) goes through a :class:`Runner`, so tests
can inject a fake that records the argv instead of touching the system.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


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


class SubprocessRunner:
    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None) -> Completed:
        proc = subprocess.run(list(argv), input=input, capture_output=True, text=True, timeout=timeout, check=False)
        return Completed(tuple(argv), proc.returncode, proc.stdout, proc.stderr)

    def spawn(self, argv: Sequence[str], cwd: Path | None = None) -> Process:
        # Output is not captured: the child writes to our stdout and stderr, which
        # is where `dvc repro` shows a stage's output.
        return subprocess.Popen(list(argv), cwd=cwd)

    def which(self, name: str) -> str | None:
        return shutil.which(name)
