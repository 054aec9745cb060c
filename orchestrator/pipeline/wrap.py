"""Wrapping a DVC stage's cmd in ``orchestrator run --``: what `orchestrator init` says of each
stage, and the rewrite of dvc.yaml that `init --wrap` does.

A wrapped stage needs three things: its cmd after ``orchestrator run --``; every output
``persist: true`` (the planner refuses others: DVC would delete a running job's work on a
re-run); and ``provenance.json`` beside each metrics file declared (``cache: false, persist:
true``, as the shipped pipeline does), so that git and experiments carry it and it is not an
untracked file in the user's results. The rewrite does all three or nothing. When it puts the
cmd after ``orchestrator run --``, it also declares ``orchestrator.cluster`` among the stage's
params (unless they hold it, its section or all of params.yaml): results made on one cluster are
then stale after `orchestrator use OTHER`. Only then: a stage wrapped already may leave it out
on purpose (data preparation that is the same on every cluster).

dvc.yaml is the user's file, with their comments and layout: it is edited with ruamel's
round-trip parser only when that parser writes the unchanged file back byte for byte (with the
file's own indentation), and the result is read back and compared with the intended change
before it replaces the file in one rename. Anything else is refused with what to write by hand.
"""

from __future__ import annotations

import io
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.config.params import PARAMS_FILE
from orchestrator.errors import PipelineError
from orchestrator.pipeline import cmdline, stages
from orchestrator.pipeline.stages import _RUN, PIPELINE_FILE, PROVENANCE_FILE

PREFIX = "orchestrator run --"
CLUSTER_PARAM = "orchestrator.cluster"  # the cluster a result was made on, a param of each stage init wraps
OUTPUT_KEYS = ("outs", "metrics", "plots")
# DVC's interpolation, resolved before the command runs: not shell syntax.
_INTERPOLATION = re.compile(r"\$\{[^}]*\}")


@dataclass(frozen=True)
class Stage:
    name: str
    cmd: object  # a string, or a list of them (DVC runs each), or missing
    wrapped: bool
    problem: str | None  # why init cannot wrap it; None when it can (or it is wrapped already)
    todo: tuple[str, ...]  # what a wrapped stage still lacks (outputs to persist, provenance to declare)


def stages_of(data: object) -> list[Stage]:
    """Each stage of a loaded dvc.yaml, whether its cmd runs through the orchestrator, and what wrapping it takes."""
    found = []
    for name, stage in _stages(data).items():
        if not isinstance(stage, Mapping):
            continue
        cmd = stage.get("cmd")
        wrapped = isinstance(cmd, str) and bool(_RUN.match(cmd))
        found.append(Stage(str(name), cmd, wrapped, None if wrapped else _problem(cmd), tuple(_todo(stage))))
    return found


def _stages(data: object) -> Mapping:
    stages = data.get("stages") if isinstance(data, Mapping) else None
    return stages if isinstance(stages, Mapping) else {}


def _problem(cmd: object) -> str | None:
    if isinstance(cmd, list):
        return "its cmd is a list of commands (DVC runs each): an orchestrated job is one command; put them in a script and wrap that"
    if not isinstance(cmd, str) or not cmd.strip():
        return "it has no cmd"
    if "\n" in cmd.strip():
        return "its cmd has line breaks (DVC runs each line as a command): make it one command, or a script, and wrap that"
    _, syntax = cmdline.split_plain(_INTERPOLATION.sub("x", cmd.strip()))
    if syntax:
        return (
            f"its cmd has shell syntax ({'; '.join(syntax)}), which an orchestrated command may not: "
            "put the command in a script and wrap `bash SCRIPT`, or single-quote what the shell should not read"
        )
    return None


def _entries(stage: Mapping, key: str) -> list[tuple[str, object]]:
    """(path, its options) of a stage's outs, metrics or plots as DVC writes them: a path, or a one-key mapping."""
    value = stage.get(key)
    found: list[tuple[str, object]] = []
    for entry in value if isinstance(value, list) else []:
        if isinstance(entry, str):
            found.append((entry, None))
        elif isinstance(entry, Mapping) and len(entry) == 1:
            ((path, options),) = entry.items()
            found.append((str(path), options))
    return found


def _todo(stage: Mapping) -> list[str]:
    todo = []
    unpersisted = [p for key in OUTPUT_KEYS for p, o in _entries(stage, key) if not (isinstance(o, Mapping) and o.get("persist") is True)]
    if unpersisted:
        todo.append(f"`persist: true` on {', '.join(unpersisted)}")
    missing = _provenance_missing(stage)
    if missing:
        todo.append(f"{', '.join(missing)} declared among its outs (cache: false, persist: true)")
    return todo


def _provenance_missing(stage: Mapping) -> list[str]:
    """The provenance files the orchestrator writes for this stage (one beside each metrics file) that it does not declare."""
    declared = {p for key in OUTPUT_KEYS for p, _ in _entries(stage, key)}
    wanted = sorted({posixpath.join(posixpath.dirname(p), PROVENANCE_FILE) for p, _ in _entries(stage, "metrics")})
    return [p for p in wanted if p not in declared]


def declares_cluster(stage: Mapping) -> bool:
    """Whether the stage's params hold ``orchestrator.cluster``: itself, the ``orchestrator`` section,
    or all of params.yaml (``- params.yaml:`` with no keys). Params that are not DVC's list count as
    declaring it: the rewrite leaves them to DVC's own check."""
    entries = stage.get("params")
    if entries is None:
        return False
    if not isinstance(entries, list):
        return True
    covering = ("orchestrator", CLUSTER_PARAM)
    for entry in entries:
        if isinstance(entry, str) and entry in covering:
            return True
        if isinstance(entry, Mapping) and PARAMS_FILE in entry:
            keys = entry[PARAMS_FILE]
            if not keys or (isinstance(keys, list) and any(k in covering for k in keys)):
                return True
    return False


def newly_declaring_cluster(before: object, after: object, names: Sequence[str]) -> list[str]:
    """Those of the stages ``names`` whose params declare ``orchestrator.cluster`` in ``after`` and not ``before`` (loaded dvc.yaml)."""
    old, new = _stages(before), _stages(after)
    return [n for n in names if isinstance(new.get(n), Mapping) and declares_cluster(new[n]) and not declares_cluster(old.get(n) or {})]


def _put_after(stage: Any, key: str, value: Any, after: Sequence[str]) -> None:
    """``stage[key] = value``, placed after the first key of ``after`` the stage has (ruamel's map keeps the order)."""
    keys = list(stage)
    at = next((keys.index(k) + 1 for k in after if k in keys), len(keys))
    if hasattr(stage, "insert"):
        stage.insert(at, key, value)
    else:
        stage[key] = value


def _apply(
    data: Any,
    names: Sequence[str],
    new_map: Callable[[], dict],
    new_seq: Callable[[], list],
    new_cmd: Callable[[Any], Any],
    new_params: Callable[[], list],
    cluster_param: bool,
) -> None:
    """Wrap the stages ``names`` of ``data`` in place. The same edit on plain data (the expected
    result) and on ruamel's round-trip document (what is written): ``new_map``, ``new_seq``, ``new_cmd``
    and ``new_params`` (a stage's new params list) make the values of each kind. ``cluster_param``:
    whether params.yaml holds ``orchestrator.cluster``, which a stage whose cmd is wrapped now declares."""
    stages = data["stages"]
    for name in names:
        stage = stages[name]
        if not _RUN.match(stage["cmd"]):
            stage["cmd"] = new_cmd(stage["cmd"])
            if cluster_param and not declares_cluster(stage):
                if isinstance(stage.get("params"), list):
                    stage["params"].append(CLUSTER_PARAM)
                else:
                    params = new_params()
                    params.append(CLUSTER_PARAM)
                    _put_after(stage, "params", params, ("deps", "cmd"))
        for key in OUTPUT_KEYS:
            entries = stage.get(key)
            for i, entry in enumerate(entries if isinstance(entries, list) else []):
                if isinstance(entry, str):
                    options = new_map()
                    options["persist"] = True
                    entries[i] = new_map()
                    entries[i][entry] = options
                    continue
                ((path, options),) = entry.items()
                if not isinstance(options, dict):  # `- path:` with nothing after it
                    options = entry[path] = new_map()
                options["persist"] = True
        missing = _provenance_missing(stage)
        if missing and not isinstance(stage.get("outs"), list):
            stage["outs"] = new_seq()
        for path in missing:
            options = new_map()
            options["cache"] = False
            options["persist"] = True
            entry = new_map()
            entry[path] = options
            stage["outs"].append(entry)


def head(cmd: str) -> str:
    """What goes before ``cmd`` to wrap it: :data:`PREFIX`, and ``env`` where the command starts
    with shell assignments (``FOO=1 python x.py``). DVC runs a stage's cmd through a shell,
    but ``orchestrator run`` starts the words after ``--`` as a program, where ``FOO=1`` would
    be a program of that name; env sets them as the shell would have."""
    return f"{PREFIX} env" if stages.ASSIGNMENT.match(cmd.lstrip()) else PREFIX


def wrapped(cmd: str) -> str:
    return f"{head(cmd)} {cmd}"


def _styled_cmd(cmd: Any) -> Any:
    """``orchestrator run -- CMD`` in the style the user wrote CMD: a folded block keeps its
    lines (the prefix a line of its own), a literal block and quotes stay as they were."""
    from ruamel.yaml.scalarstring import FoldedScalarString, LiteralScalarString, ScalarString

    first = head(str(cmd))
    text = f"{first} {cmd}"
    if isinstance(cmd, FoldedScalarString):
        new = FoldedScalarString(text)
        # Each fold is a space of the text written as a line break: the old ones moved by the
        # prefix, and one after it, so the prefix stands on its own line as in the shipped dvc.yaml.
        new.fold_pos = [len(first), *(p + len(first) + 1 for p in getattr(cmd, "fold_pos", []))]
        return new
    if isinstance(cmd, LiteralScalarString):
        return LiteralScalarString(text)  # on the command's first line: a line break here would end the command
    if isinstance(cmd, ScalarString):
        return type(cmd)(text)  # quoted as it was
    return text


def _round_trip(text: str):
    """A ruamel YAML that writes ``text`` back unchanged, and its document; None if none does."""
    from ruamel.yaml import YAML

    for mapping, sequence, offset in ((2, 4, 2), (2, 2, 0), (4, 4, 2), (4, 6, 4), (4, 4, 0)):
        yaml = YAML()
        yaml.preserve_quotes = True
        yaml.width = 1 << 16  # never fold a long line the user wrote on one
        yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
        try:
            doc = yaml.load(text)
        except Exception:  # ruamel's own errors: the plain loader read it, so only this way of editing is out
            return None
        if _dump(yaml, doc) == text:
            return yaml, doc
    return None


def _dump(yaml, doc) -> str:
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


def rewrite(text: str, data: Any, names: Sequence[str], cluster_param: bool = True) -> str:
    """dvc.yaml's ``text`` (loaded: ``data``) with the stages ``names`` wrapped; PipelineError, and
    nothing rewritten, where that cannot be done without touching the rest of the file.
    ``cluster_param``: whether params.yaml holds (or will hold) ``orchestrator.cluster`` for the
    stages to declare (DVC refuses a declared param that params.yaml lacks)."""
    import copy

    from orchestrator.util import yamlio

    hand = f"wrap them by hand: cmd `{PREFIX} ...`, `persist: true` on every output, provenance.json declared beside its metrics" + (
        f", {CLUSTER_PARAM} among its params" if cluster_param else ""
    )
    found = _round_trip(text)
    if found is None:
        raise PipelineError(
            f"{PIPELINE_FILE}: cannot rewrite it without changing its layout (a YAML style the editor does not keep)",
            hints=[f"{hand}; nothing was changed"],
        )
    yaml, doc = found
    expected = copy.deepcopy(data)
    _apply(expected, names, dict, list, wrapped, list, cluster_param)
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    def flow_seq() -> CommentedSeq:
        seq = CommentedSeq()
        seq.fa.set_flow_style()  # `params: [orchestrator.cluster]`, as the docs write it
        return seq

    _apply(doc, names, CommentedMap, CommentedSeq, _styled_cmd, flow_seq, cluster_param)
    new = _dump(yaml, doc)
    if yamlio.load_text(new, PIPELINE_FILE) != expected:  # a guard: the edit must be exactly the intended one
        raise PipelineError(
            f"{PIPELINE_FILE}: the rewrite would change more than the wrapped stages", hints=[f"{hand}; nothing was changed"]
        )
    return new
