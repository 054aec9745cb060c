"""The git state of a project: which commit, and whether files differ from it.

Asked by provenance (what produced a result) and by the image build (what went
into an image); both go through a Runner and treat "no git" as an answer.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.util.runner import Runner

_COMMIT = re.compile(r"[0-9a-f]{40,64}")


@dataclass(frozen=True)
class GitState:
    commit: str
    dirty: bool


def state(root: Path, runner: Runner, paths: Sequence[str] = (), *, untracked: bool = True) -> GitState | None:
    """HEAD and whether ``paths`` (default: the whole tree) differ from it; None outside git.

    ``untracked=False`` ignores files git does not track (a results folder beside
    the code is not a change to the code)."""
    if not runner.which("git"):
        return None
    head = _stdout(runner, ["git", "-C", str(root), "rev-parse", "HEAD"])
    if head is None or not _COMMIT.fullmatch(head):
        return None
    argv = ["git", "-C", str(root), "status", "--porcelain"]
    if not untracked:
        argv.append("--untracked-files=no")
    status = _stdout(runner, [*argv, "--", *paths] if paths else argv)
    return GitState(head, status is None or bool(status))


def _stdout(runner: Runner, argv: Sequence[str]) -> str | None:
    try:
        done = runner.run(argv, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
