"""The text patterns validation and quoting share, defined once so they cannot drift.

A value checked with one of these where it enters (a profile, params.yaml, a
push target) is then quoted or expanded by code that relies on the same rule.
"""

from __future__ import annotations

import re

# An environment variable's name (use with fullmatch).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A ``${NAME}`` reference in a runtime template (``/tmp/${USER}-cache``).
RUNTIME_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Control characters: they never pass into a file name, a directive or a remote path.
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A value that may stand unquoted in an ``#SBATCH`` directive, which no shell
# ever parses, so it cannot be quoted there (use with fullmatch).
DIRECTIVE_SAFE = re.compile(r"[A-Za-z0-9._@%:/+=,-]+")
# A constraint directive: also Slurm's operators & | [ ] * (sbatch reads a directive, never a shell).
CONSTRAINT_SAFE = re.compile(r"[A-Za-z0-9._@%:/+=,&|\[\]*-]+")


def runtime_problems(value: str) -> list[str]:
    """Why ``value`` is not a valid runtime template (empty list: it is)."""
    stripped = RUNTIME_REF.sub("", value)
    if "$" in stripped:
        return [f"{value!r}: only ${{NAME}} references may expand at run time; write other '$' as part of ${{NAME}}"]
    return []
