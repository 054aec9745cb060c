"""Running commands: one small interface, argv lists only, never ``shell=True``.

Everything the orchestrator runs (bash, shellcheck, and later sbatch, sacct,
apptainer) goes through a :class:`Runner`, so tests can inject a fake that
records the argv instead of touching the system.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class Runner(Protocol):
    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None) -> Completed: ...

    def which(self, name: str) -> str | None: ...


class SubprocessRunner:
    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None) -> Completed:
        proc = subprocess.run(list(argv), input=input, capture_output=True, text=True, timeout=timeout, check=False)
        return Completed(tuple(argv), proc.returncode, proc.stdout, proc.stderr)

    def which(self, name: str) -> str | None:
        return shutil.which(name)
