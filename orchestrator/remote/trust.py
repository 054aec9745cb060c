"""What comes from the cluster is data: the checks ``orchestrator fetch`` puts it through.

Anyone who can write the cluster's project folder (a project group sharing ``/scratch/<project>``,
a compromised account) writes its ``dvc.lock`` and the files it names. So fetch reads that lock
as plain YAML under a size cap (no anchors or aliases, bounded depth), places a path only where
this side's dvc.yaml declares it an out of that stage and never where git, DVC or the
orchestrator keep their own state (a hook in ``.git/hooks`` runs at the next commit), places only
regular files and folders, each with the mode a new file gets from the user's umask, and writes
into the local dvc.lock only the fields it checked.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from orchestrator.util import files
from orchestrator.util.ssh import RemoteError

MAX_LOCK_BYTES = 64 * 1024 * 1024  # a 1,000-item matrix's lock is about 1 MB
MAX_STAGES = 100_000
MAX_LIST = 100_000  # outs, deps or params of one stage, items of one list
MAX_DEPTH = 64  # nesting of a params value; DVC writes stages four levels deep
MAX_NODES = 5_000_000

# Folders whose content is code or configuration to git, DVC or the orchestrator, at any depth
# (a nested repository's hooks run for whoever works in it); compared case-folded, for the
# case-insensitive file systems of macOS and Windows workstations.
STATE_FOLDERS = frozenset({".git", ".dvc", ".orchestrator"})
# The pipeline's own files, wherever they lie: they say what runs and what git and DVC track.
PIPELINE_FILES = frozenset(
    {"dvc.yaml", "dvc.lock", "params.yaml", ".gitignore", ".gitattributes", ".gitmodules", ".dvcignore", ".mailmap", ".dvc"}
)
MD5 = re.compile(r"[0-9a-f]{32}(\.dir)?")
_SHOWN = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class FetchRefused(RemoteError):
    """Something from the cluster that fetch will not take: the stage (or the whole lock) is refused."""

    exit_code = 1


def shown(text: object) -> str:
    """``text`` safe to print: a control character (a terminal escape written into a lock) as its escape."""
    return _SHOWN.sub(lambda m: repr(m.group())[1:-1], str(text))


# --- paths ---------------------------------------------------------------------


def path_problem(path: object, own: frozenset[str] = frozenset()) -> str | None:
    """Why ``path`` (relative to the project) may never be placed; None: it may, if declared.
    ``own``: more of the pipeline's files (the params files its stages read), normalized."""
    if not isinstance(path, str) or not path:
        return "not a path"
    if "\0" in path or "\\" in path:
        return "not a plain path"
    if path.startswith("/"):
        return "an absolute path"
    norm = posixpath.normpath(path)
    parts = norm.split("/")
    if ".." in parts or norm == ".":
        return "not inside the project"
    for part in parts:
        problem = name_problem(part)
        if problem:
            return problem
    if norm in own:
        return "one of the pipeline's own files"
    return None


def name_problem(name: str) -> str | None:
    """Why a file or folder of this name is never placed, at any depth; None: it may be."""
    folded = name.casefold()
    if folded in STATE_FOLDERS:
        return f"inside {name}/, where git, DVC or the orchestrator keep their state"
    if folded in PIPELINE_FILES or folded.endswith(".dvc"):
        return "one of the pipeline's own files"
    return None


def tree_problems(root: Path, shown_as: str) -> list[str]:
    """What under ``root`` (a staged out) may not be placed: special files (links, FIFOs, devices,
    sockets) and the names :func:`name_problem` refuses. Looked at with lstat, never followed."""
    found = []
    for path in _walk(root):
        where = posixpath.join(shown_as, path.relative_to(root).as_posix()) if path != root else shown_as
        mode = path.lstat().st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            found.append(f"{shown(where)}: not a regular file or folder ({files.kind_words(mode)}): never placed")
        elif path != root and (problem := name_problem(path.name)):
            found.append(f"{shown(where)}: {problem}: never placed")
    return found


def _walk(root: Path) -> Iterator[Path]:
    stack = [root]
    while stack:
        path = stack.pop()
        yield path
        if stat.S_ISDIR(path.lstat().st_mode):
            stack.extend(path.iterdir())


def set_modes(root: Path, mask: int) -> None:
    """Each file under ``root`` the mode a new file gets (0666 less the umask), each folder a new
    folder's: no exec, setuid or setgid bit from the cluster. Links are never followed."""
    for path in _walk(root):
        if stat.S_ISDIR(path.lstat().st_mode):
            os.chmod(path, 0o777 & ~mask, follow_symlinks=False)
        else:
            os.chmod(path, 0o666 & ~mask, follow_symlinks=False)


# --- the lock ------------------------------------------------------------------

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_PLAIN = (str, int, float, bool, date, type(None))


def load_lock(text: str, where: str) -> Any:
    """The YAML document ``text`` (a dvc.lock) as plain data: :class:`FetchRefused` for one over the
    size cap, with an anchor or alias (a billion-laughs lock expands only when built, so the
    events are looked at first), nested too deep, or holding values YAML tags make non-plain."""
    if len(text) > MAX_LOCK_BYTES:
        raise FetchRefused(f"the dvc.lock at {where} is over {MAX_LOCK_BYTES // 2**20} MiB: not read, nothing fetched")
    try:
        _check_events(text, where)
        data = yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise FetchRefused(f"the dvc.lock at {where} is not valid YAML{at}: {shown(getattr(exc, 'problem', None) or exc)}") from None
    problem = plain_problem(data)
    if problem:
        raise FetchRefused(f"the dvc.lock at {where} is not plain data: {problem}")
    return data


def _check_events(text: str, where: str) -> None:
    depth = nodes = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise FetchRefused(f"the dvc.lock at {where} has YAML anchors or aliases (DVC writes none): not read, nothing fetched")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise FetchRefused(f"the dvc.lock at {where} nests deeper than {MAX_DEPTH} levels: not read, nothing fetched")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        nodes += 1
        if nodes > MAX_NODES:
            raise FetchRefused(f"the dvc.lock at {where} has over {MAX_NODES:,} values: not read, nothing fetched")


def plain_problem(data: Any) -> str | None:
    """What in ``data`` is not plain YAML data (mappings with text keys, lists, scalars), or a list
    or mapping over :data:`MAX_LIST` long; None: all of it is."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if len(value) > MAX_LIST:
                return f"a mapping of over {MAX_LIST:,} keys"
            if not all(isinstance(key, str) for key in value):
                return "a key that is not text"
            stack.extend(value.values())
        elif isinstance(value, list):
            if len(value) > MAX_LIST:
                return f"a list of over {MAX_LIST:,} items"
            stack.extend(value)
        elif not isinstance(value, _PLAIN):
            return f"a {type(value).__name__} value"
    return None


def lock_stages(data: Any, where: str) -> dict[str, Any]:
    """The ``stages`` mapping of a lock read by :func:`load_lock` (empty: none)."""
    if data is None:
        return {}
    stages = data.get("stages") if isinstance(data, dict) else None
    if isinstance(data, dict) and stages is None:
        return {}
    if not isinstance(stages, dict):
        raise FetchRefused(f"the dvc.lock at {where} is not one DVC wrote (not a mapping with a `stages` mapping): nothing fetched")
    if len(stages) > MAX_STAGES:
        raise FetchRefused(f"the dvc.lock at {where} has over {MAX_STAGES:,} stages: nothing fetched")
    return stages


# --- a stage's entry -----------------------------------------------------------


@dataclass(frozen=True)
class Declared:
    """An out of a stage as this side's dvc.yaml declares it."""

    path: str  # as dvc.yaml writes it (DVC matches lock entries to it by this text)
    cached: bool


@dataclass(frozen=True)
class Out:
    """One out of a lock entry, checked: a declared out of the stage, and the hash DVC recorded for it."""

    path: str  # normalized, relative to the project
    md5: str
    hash_name: str  # "md5" (DVC 3), "md5-dos2unix" (a DVC 2 entry without `hash: md5`)
    declared: str  # the path as dvc.yaml writes it
    cached: bool = True  # `cache: false` outs are no DVC objects (and in no DVC remote)

    @property
    def isdir(self) -> bool:
        return self.md5.endswith(".dir")


def verify_outs(name: str, entry: Any, declared: Mapping[str, Declared] | None, own: frozenset[str] = frozenset()) -> list[Out]:
    """The outs of the cluster's lock entry ``entry`` for stage ``name``, each a declared out of that
    stage here (``declared``: by normalized path; None: no such stage here) that may be placed, with a
    DVC md5; else :class:`FetchRefused`, naming the stage and why. An empty list: the entry has no outs."""
    if declared is None:
        raise refusal(name, "this project's dvc.yaml has no such stage")
    if not isinstance(entry, dict) or not isinstance(entry.get("outs") or [], list):
        raise refusal(name, "its entry there is not a DVC lock entry (a mapping with a list of outs)")
    outs = [_verify_out(name, out, declared, own) for out in entry.get("outs") or []]
    twice = sorted(path for path, count in Counter(out.path for out in outs).items() if count > 1)
    if twice:
        raise refusal(name, f"its entry there names {', '.join(twice)} more than once")
    return outs


def refusal(name: str, why: str) -> FetchRefused:
    """The refusal of stage ``name``: its headline ``NAME: WHY``, the name printable whatever the lock held."""
    return FetchRefused(f"{shown(name)}: {why}")


def _verify_out(name: str, out: Any, declared: Mapping[str, Declared], own: frozenset[str]) -> Out:
    path = out.get("path") if isinstance(out, dict) else None
    problem = path_problem(path, own)
    if problem or not isinstance(path, str):  # not a string: a problem too
        raise refusal(name, f"its entry there names {shown(path)!r}: {problem}")
    norm = posixpath.normpath(path)
    if norm not in declared:
        raise refusal(
            name, f"its entry there names {shown(path)!r}, which this project's dvc.yaml does not declare an out of {shown(name)}"
        )
    md5, kind = out.get("md5"), out.get("hash")
    if not isinstance(md5, str) or not MD5.fullmatch(md5):
        raise refusal(name, f"its entry there has no DVC md5 for {norm} (found {shown(md5)!r})")
    if kind not in (None, "md5"):
        raise refusal(name, f"its entry there hashes {norm} with {shown(kind)!r}, not md5")
    return Out(norm, md5, "md5" if kind == "md5" else "md5-dos2unix", declared[norm].path, declared[norm].cached)


def entry_fields(name: str, entry: dict) -> dict:
    """The fields of the cluster's entry for ``name`` besides its outs (cmd, deps, params), checked
    against DVC's own lock schema, as plain data: :class:`FetchRefused` for any other field or shape."""
    import voluptuous as vol
    from dvc.schema import LOCK_FILE_STAGE_SCHEMA

    others = {key: value for key, value in entry.items() if key != "outs"}
    try:
        checked = vol.Schema({key: rule for key, rule in LOCK_FILE_STAGE_SCHEMA.items() if str(key) != "outs"})(others)
    except vol.Invalid as exc:
        raise refusal(name, f"its entry there is not one DVC writes: {shown(exc)}") from None
    problem = plain_problem(checked)
    if problem:
        raise refusal(name, f"its entry there is not plain data: {problem}")
    return {key: checked[key] for key in ("cmd", "deps", "params") if key in checked}
