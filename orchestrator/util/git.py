"""git, run through a Runner: :class:`Git` is every ``git -C ROOT ...`` of the package.

Also the git state of a project (:func:`state`): which commit, and whether files differ
from it, asked by provenance (what produced a result) and by the image build (what went
into an image), which treat "no git" as an answer.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.util.runner import Completed, Runner

_COMMIT = re.compile(r"[0-9a-f]{40,64}")


TIMEOUT_S = 600


def argv(root: Path, *args: str, env: Mapping[str, str] | None = None) -> list[str]:
    """``git -C ROOT ARGS``; ``env`` (e.g. ``GIT_INDEX_FILE``) through env(1), since a Runner takes no environment."""
    prefix = ["env", *(f"{name}={value}" for name, value in env.items())] if env else []
    return [*prefix, "git", "-C", str(root), *args]


@dataclass(frozen=True)
class Git:
    """git in the repository (or a folder inside it) ``root``."""

    root: Path
    runner: Runner

    def run(self, *args: str, timeout: float = TIMEOUT_S, env: Mapping[str, str] | None = None) -> Completed:
        """The call's result whatever its exit status; FileNotFoundError where git is not installed."""
        return self.runner.run(argv(self.root, *args, env=env), timeout=timeout)

    def output(self, *args: str, timeout: float = TIMEOUT_S) -> str | None:
        """The call's stdout as git wrote it; None where git failed, is not installed or timed out."""
        try:
            done = self.run(*args, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None


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
    git = Git(root, runner)
    head = (git.output("rev-parse", "HEAD", timeout=60) or "").strip()
    if not _COMMIT.fullmatch(head):
        return None
    args = ["status", "--porcelain", *([] if untracked else ["--untracked-files=no"])]
    status = git.output(*args, *(["--", *paths] if paths else []), timeout=60)
    return GitState(head, status is None or bool(status.strip()))
