"""Cluster profiles: the facts about a cluster, as data.

A profile is a YAML file (the built-in ones ship in ``orchestrator/config/profiles``)
turned once into frozen dataclasses, then checked for meaning (partitions exist,
times parse, the topology is consistent). ``--cluster`` takes a built-in name or
a path; ``orchestrator clusters show NAME --format yaml`` prints the file a user
copies, edits and passes back.

Values that are only known on the compute node (``${USER}``, ``${SLURM_NODEID}``,
``${SLURM_JOB_ACCOUNT}``) are written as ``${NAME}`` runtime templates; no other
shell expansion is allowed in profile values (see :mod:`orchestrator.scripts.quoting`). The container
``setup`` lines are the one exception: they are shell code by design.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from orchestrator.config.profile_checks import problems
from orchestrator.config.profile_schema import (
    LoadedProfile,
    Profile,
)
from orchestrator.errors import ConfigError, ProfileError, UnreadableFile
from orchestrator.util import files, yamlio

BUILTIN_DIR = Path(__file__).parent / "profiles"


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))


def load(name_or_path: str) -> LoadedProfile:
    """Load a built-in profile by name, or a profile file by path."""
    path = Path(name_or_path)
    looks_like_path = path.suffix in (".yaml", ".yml") or "/" in name_or_path or _stat(path) is not None
    hints = [
        f"built-in profiles: {', '.join(builtin_names())}",
        "or pass the path to a profile file (see `orchestrator clusters show NAME --format yaml`)",
    ]
    if looks_like_path:
        return _load_file(path, source=str(path), hints=hints)
    builtin = BUILTIN_DIR / f"{name_or_path}.yaml"
    if name_or_path not in builtin_names():
        shown = repr(name_or_path) if len(name_or_path) <= 80 else f"{name_or_path[:80]!r}... ({len(name_or_path)} characters)"
        raise ProfileError(f"unknown cluster {shown}", hints=hints)
    return _load_file(builtin, source="built-in")


# A profile is a few kilobytes of YAML; more is some other file (and /dev/zero never ends).
_MAX_PROFILE_BYTES = 1 << 20


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except (OSError, ValueError):  # missing, unreachable, a name too long, a NUL in it
        return None


def _read_profile(path: Path, hints: list[str]) -> str:
    """The text of a profile file, or one ProfileError saying what ``path`` is instead."""
    where = f"profile file {str(path)!r}"
    try:
        return files.read_text(path, _MAX_PROFILE_BYTES, follow_symlinks=True)  # a path the user typed may be a link
    except UnreadableFile as exc:
        if exc.kind in ("missing", "unreadable"):
            raise ProfileError(f"{where} {exc.reason}", hints=hints) from None
        if exc.kind == "folder":
            raise ProfileError(f"{where} is a folder; --cluster takes a profile file (YAML) or a built-in name", hints=hints) from None
        if exc.kind == "too-large":
            raise ProfileError(f"{where} {exc.reason}: not a profile (a profile is a small YAML file)") from None
        raise ProfileError(f"{where} {exc.reason}; give a profile file (YAML)", hints=hints if exc.kind != "not-text" else ()) from None


def _load_file(path: Path, source: str, hints: Sequence[str] = ()) -> LoadedProfile:
    text = _read_profile(path, list(hints))
    try:
        data = yamlio.load_text(text, str(path))
    except ConfigError as exc:
        raise ProfileError(f"profile {exc.headline}", exc.problems) from exc
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: a profile is a mapping of keys (name, scheduler, node, ...)")
    try:
        profile = yamlio.structure(data, Profile, f"profile {path}")
    except ConfigError as exc:
        raise ProfileError(exc.headline, exc.problems) from exc
    found = problems(profile)
    if found:
        raise ProfileError(f"profile {path} is invalid", found)
    return LoadedProfile(profile, source, text)
