"""One exception hierarchy for everything a user can get wrong.

Every error carries a headline and a list of problems, so one run reports every
problem at once; the CLI prints them and exits non-zero without a traceback.
Programming errors are not wrapped: they should surface as tracebacks.
"""

from __future__ import annotations

from collections.abc import Iterable


class OrchestratorError(Exception):
    """Base class: an error the user can fix (bad input, missing file, bad cluster)."""

    exit_code = 2

    def __init__(self, headline: str, problems: Iterable[str] = (), hints: Iterable[str] = ()) -> None:
        self.headline = headline
        self.problems = tuple(problems)
        self.hints = tuple(hints)  # the valid choices, or what to do about it
        super().__init__(self.render())

    def render(self) -> str:
        lines = [self.headline]
        if self.problems:
            n = len(self.problems)
            lines = [f"{self.headline} ({n} problem{'s' if n != 1 else ''}):"]
            lines += [f"  - {_indent(p)}" for p in self.problems]
        lines += [f"  {_indent(h)}" for h in self.hints]
        return "\n".join(lines)


def _indent(text: str) -> str:
    return text.replace("\n", "\n    ")


class UnreadableFile(OrchestratorError):
    """A file read from the disk is missing, not a regular file, too large or not text.

    ``reason`` completes a sentence about the file ("is a FIFO, not a regular file"), so a
    caller that knows what the file is for can name it its own way; ``kind`` says which
    (missing, folder, link, special, unreadable, too-large, not-text)."""

    def __init__(self, path: object, kind: str, reason: str) -> None:
        self.path = str(path)
        self.kind = kind
        self.reason = reason
        super().__init__(f"{self.path} {reason}")

    @property
    def missing(self) -> bool:
        return self.kind == "missing"


class ConfigError(OrchestratorError):
    """A YAML file (profile, params) is malformed or has unknown or invalid keys."""


class ProfileError(ConfigError):
    """A cluster profile cannot be found or is invalid."""


class PipelineError(OrchestratorError):
    """dvc.yaml / params.yaml cannot be resolved, or a stage calls us wrongly."""


class PlanError(OrchestratorError):
    """A job cannot be planned for the chosen cluster (resources, account, masks)."""


class CheckError(OrchestratorError):
    """Rendered scripts failed their checks (bash -n, shellcheck, plan checks)."""

    exit_code = 1


class JobFailed(OrchestratorError):
    """The job ran and failed: the stage fails with the job's id, exit code and log."""

    exit_code = 1
