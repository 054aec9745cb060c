"""The DVC pipeline: resolved by DVC itself, never re-interpreted here.

``dvc.yaml`` is resolved with DVC's own ``DataResolver`` (the code behind
``dvc stage list`` and ``dvc repro``): ``vars``, params files, ``foreach`` and
``matrix`` all follow DVC's rules. The only thing added is an optional params
overlay (``clusters.NAME`` in params.yaml, see :mod:`orchestrator.config.params`), merged into DVC's
own context before the stages are resolved, as ``dvc exp run -S`` would set it.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import os
import posixpath
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import PipelineError, UnreadableFile
from orchestrator.pipeline import cmdline, runargs
from orchestrator.util import files

PIPELINE_FILE = "dvc.yaml"
LOCK_FILE = "dvc.lock"
PARAMS_FILE = "params.yaml"
CACHE_DIR = ".orchestrator/cache"
# Files DVC itself rewrites as stages run (the lock, and the .gitignore beside each output
# it adds): never the project's code, wherever they are tracked.
DVC_WRITES = (LOCK_FILE, ".gitignore")
# DVC's record of a 100,000-item matrix is some hundred megabytes; a larger file is not one,
# and DVC would read it whole.
MAX_LOCK_BYTES = 1 << 30
# Written by the jobs beside each metrics file of a finished item, read by the report.
PROVENANCE_FILE = "provenance.json"
# A shell assignment (`FOO=1`): before a command, the shell sets it; as the first word after
# `orchestrator run --`, nothing would start (no program has that name).
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
# A stage whose cmd starts so is a job of ours (runargs.run_args_of reads its words).
_RUN = re.compile(r"\s*(\S*/)?(orchestrator|python[0-9.]*\s+-m\s+orchestrator)\s+run(\s|$)")


@dataclass(frozen=True)
class Item:
    """One resolved stage (a matrix item or a plain stage) of dvc.yaml."""

    name: str  # as DVC addresses it: "benchmark@pydoc-gpt-key0"
    group: str  # the stage it was generated from: "benchmark"
    cmd: str
    outs: tuple[str, ...]
    wdir: str  # relative to the project root; "" for the root
    removable: tuple[str, ...] = ()  # outs without `persist: true`
    deps: tuple[str, ...] = ()  # as written (relative to wdir), params files included
    metrics: tuple[str, ...] = ()  # its `metrics:` entries as written (relative to wdir); among outs too

    @property
    def metric_files(self) -> tuple[str, ...]:
        """Its declared metrics files relative to the project root: what `dvc metrics show` and the report read."""
        return _inside(self.metrics, self.wdir)

    @property
    def inputs(self) -> tuple[str, ...]:
        """Deps inside the project, relative to its root: what a job reads from it."""
        return _inside(self.deps, self.wdir)

    @property
    def outputs(self) -> tuple[str, ...]:
        """Outs relative to the project root."""
        return _inside(self.outs, self.wdir)


def _inside(paths: Sequence[str], wdir: str) -> tuple[str, ...]:
    found = []
    for path in paths:
        if "://" in path or path.startswith(("/", "~")):
            continue  # a URL or a path outside the project: read where it is
        joined = posixpath.normpath(posixpath.join(wdir, path)) if wdir else posixpath.normpath(path)
        if joined != ".." and not joined.startswith("../") and joined not in found:
            found.append(sys.intern(joined))  # the deps items share: one string, not one per item
    return tuple(found)


@dataclass(frozen=True)
class Job:
    """An item whose command runs through ``orchestrator run``."""

    item: Item
    spec: runargs.JobSpec


def require_pipeline(root: Path) -> None:
    """PipelineError unless ``root`` has a dvc.yaml: checked before anything slower (asking
    Slurm which cluster this is can take seconds when its controller does not answer)."""
    if not (root / PIPELINE_FILE).is_file():
        raise PipelineError(f"no {PIPELINE_FILE} in {root}: run this from a DVC project (or pass --project)")


def resolve(root: Path, overlay: Mapping[str, Any] | None = None) -> list[Item]:
    """Every stage of ``root/dvc.yaml``, resolved by DVC (matrix items expanded)."""
    require_pipeline(root)
    from dvc.exceptions import DvcException

    try:
        return [_item(name, data) for name, data in _resolve_with_dvc(root, overlay or {})]
    except DvcException as exc:
        raise PipelineError(f"DVC cannot resolve {root / PIPELINE_FILE}", dvc_problems(exc)) from exc
    except RecursionError:
        raise _too_deep(root) from None


def resolve_one(root: Path, name: str, overlay: Mapping[str, Any] | None = None) -> Item:
    """One item of ``root/dvc.yaml`` (what ``dvc repro`` is running), without resolving the rest."""
    from dvc.exceptions import DvcException

    try:
        ((_, data),) = _resolve_with_dvc(root, overlay or {}, name)
    except DvcException as exc:
        raise PipelineError(f"DVC cannot resolve stage {name!r} of {root / PIPELINE_FILE}", dvc_problems(exc)) from exc
    except RecursionError:
        raise _too_deep(root) from None
    return _item(name, data)


def resolve_group(root: Path, group: str, overlay: Mapping[str, Any] | None = None) -> list[Item]:
    """The items of the stage named ``group`` in dvc.yaml (all of a matrix's items)."""
    from dvc.exceptions import DvcException

    try:
        return [_item(name, data) for name, data in _resolve_with_dvc(root, overlay or {}, group=group)]
    except DvcException as exc:
        raise PipelineError(f"DVC cannot resolve stage {group!r} of {root / PIPELINE_FILE}", dvc_problems(exc)) from exc
    except RecursionError:
        raise _too_deep(root) from None


def _too_deep(root: Path) -> PipelineError:
    """DVC reads dvc.yaml and the params files it names recursively: a value nested some
    hundreds of levels deep ends its reader in a RecursionError, said here as one message."""
    return PipelineError(
        f"DVC cannot resolve {root / PIPELINE_FILE}: it, or a params file it reads, nests values too deep for DVC's reader",
        hints=["flatten the nesting (a person's file nests some levels, not hundreds)"],
    )


def _resolve_with_dvc(
    root: Path, overlay: Mapping[str, Any], name: str | None = None, group: str | None = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, resolved stage) of each stage, of ``name``, or of the items of ``group``,
    one at a time: a matrix of 100,000 items is never held whole in DVC's form."""
    from dvc.dvcfile import ProjectFile
    from dvc.parsing import DataResolver
    from dvc.parsing.context import Context
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        reading = str(root / PIPELINE_FILE)
        try:
            contents = ProjectFile(repo, reading).contents
            reading = f"the params of {reading}"
            resolver = DataResolver(repo, str(root), contents)
        except ValueError as exc:
            # DVC reads dvc.yaml and params files as YAML 1.1 (ruamel), whose float pattern takes
            # text such as `._` that its own float() then refuses: a ValueError from the loader,
            # not a DVC error.
            raise PipelineError(
                f"DVC cannot read {reading}",
                [f"a value DVC's YAML reader cannot convert: {exc}"],
                hints=["quote the value: DVC reads YAML 1.1, where text such as `._` looks like a number"],
            ) from exc
        if overlay:
            resolver.context.merge_update(Context(overlay), overwrite=True)
        names = [name] if name is not None else resolver.get_keys()
        if group is not None:
            names = [n for n in names if n.split("@", 1)[0] == group]
        # DVC names a matrix item after its values; an empty value makes an empty name
        # (``train@``), which DVC's resolver only meets with a bare `assert`.
        empty = sorted({n.split("@", 1)[0] for n in names if n.endswith("@")})
        if empty:
            raise PipelineError(
                f"DVC cannot name the items of {', '.join(empty)} in {root / PIPELINE_FILE}",
                ["a matrix value is empty; DVC names each item after its values (stage@value)"],
                hints=["give every matrix value some text"],
            )
        for key in names:
            yield from resolver.resolve_one(key).items()
            # What each stage read from params, kept by DVC for `dvc params diff`; unused
            # here, it would grow by a dict per item.
            getattr(resolver, "tracked_vars", {}).clear()


def by_pipeline(root: Path, kind: str, compute: Callable[[], Any]) -> Any:
    """``compute()`` (a JSON value), cached under .orchestrator/cache by the text of dvc.yaml and
    params.yaml: the many ``orchestrator run`` calls of one ``dvc repro`` (and a submission's
    many jobs) resolve the pipeline once, not once each."""
    texts = [(root / name).read_bytes() if (root / name).exists() else b"" for name in (PIPELINE_FILE, PARAMS_FILE)]
    key = hashlib.sha256(b"\0".join(texts)).hexdigest()[:32]
    cache = root / CACHE_DIR / f"{kind}-{key}.json"
    try:
        return json.loads(cache.read_text())
    except (FileNotFoundError, ValueError):
        pass
    found = compute()
    files.atomic_write(cache, json.dumps(found, sort_keys=True))
    return found


def declared_outputs(root: Path) -> list[str]:
    """Every stage's outs, metrics and plots, relative to the root: the files runs write."""
    return by_pipeline(root, "outputs", lambda: sorted({out for item in resolve(root) for out in item.outputs}))


def item_names(root: Path) -> list[str] | None:
    """The names of every item of the pipeline (cached, see :func:`by_pipeline`); None where DVC
    cannot resolve it here."""
    try:
        return by_pipeline(root, "items", lambda: [item.name for item in resolve(root)])
    except (PipelineError, OSError):
        return None


def run_outputs(root: Path) -> list[str]:
    """:func:`declared_outputs`, or none where DVC cannot resolve the pipeline here (a caller that
    only sets results apart from code then treats every file as code: the cautious side)."""
    try:
        return declared_outputs(root)
    except (PipelineError, OSError):
        return []


def written_by_runs(path: str, outputs: Sequence[str]) -> bool:
    """Whether ``path`` (relative to the root, as git names it) is what running the pipeline
    writes rather than the project's code: a declared output or a file inside one, dvc.lock,
    or a .gitignore (DVC adds each output it makes to the one beside it)."""
    if posixpath.basename(path) in DVC_WRITES:
        return True
    return any(path == out or path.startswith(out + "/") for out in outputs)


def check_lock(root: Path) -> None:
    """Refuse ``root``'s dvc.lock before DVC reads it, unless it is a regular file under
    :data:`MAX_LOCK_BYTES`: DVC would block on a FIFO, and read a link to a device or a
    huge file whole. Its shape (a mapping of stages) DVC checks itself (see :func:`dvc_problems`)."""
    path = root / LOCK_FILE
    try:
        files.check_regular(path, MAX_LOCK_BYTES)
    except UnreadableFile as exc:
        if not exc.missing:
            raise PipelineError(
                f"{path} {exc.reason}",
                hints=["dvc.lock is DVC's record of the finished stages, a YAML file DVC writes itself: put the project's own back"],
            ) from None


def dvc_problems(exc: Exception, root: Path | None = None) -> list[str]:
    """DVC's own words; schema errors carry one entry per bad key in their cause, each named
    here by its file (DVC keeps the file apart), and YAML syntax errors the parser's problem
    and where it is (DVC says only "corrupted"). ``root``: the working directory DVC ran in
    (DVC names files relative to it), when not this one."""
    cause = exc.__cause__
    errors = getattr(cause, "errors", None)
    if errors:
        where = getattr(exc, "path", None)
        if where:
            where = os.path.normpath(os.path.join(os.getcwd() if root is None else root, where))
        prefix = f"{where}: " if where else ""
        return [f"{prefix}{'.'.join(map(str, e.path)) or 'the top level'}: {e.msg}" for e in errors]
    mark, problem = getattr(cause, "problem_mark", None), getattr(cause, "problem", None)
    if mark is not None and problem:
        return [f"{exc}: {problem} at line {mark.line + 1}, column {mark.column + 1}"]
    return [str(exc)]


def _item(name: str, data: Mapping[str, Any]) -> Item:
    cmd = data.get("cmd", "")
    if isinstance(cmd, list):
        cmd = " && ".join(cmd)  # several commands: never a plain orchestrator call
    entries = [e for key in ("outs", "metrics", "plots") for e in _entries(data.get(key, ()))]
    return Item(
        name=name,
        group=name.split("@", 1)[0],
        cmd=str(cmd),
        outs=tuple(path for path, _ in entries),
        wdir=str(data.get("wdir", "") or "").strip("./"),
        removable=tuple(path for path, flags in entries if not flags.get("persist")),
        deps=tuple(sys.intern(str(d)) for d in data.get("deps", ()) or ()) + _params_files(data.get("params", ())),
        metrics=tuple(path for path, _ in _entries(data.get("metrics", ()))),
    )


def _params_files(entries: Sequence[Any]) -> tuple[str, ...]:
    """The params files a stage reads: params.yaml for bare keys, else the named files."""
    files = []
    for entry in entries or ():
        for name in entry if isinstance(entry, Mapping) else ["params.yaml"]:
            if str(name) not in files:
                files.append(str(name))
    return tuple(files)


def _entries(entries: Sequence[Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(path, flags) of each out; flags such as cache or persist may follow a path."""
    found = []
    for entry in entries or ():
        if isinstance(entry, Mapping):
            found += [(str(path), flags or {}) for path, flags in entry.items()]
        else:
            found.append((str(entry), {}))
    return found


def select(items: Sequence[Item], targets: Sequence[str]) -> list[Item]:
    """Items named by ``targets`` (item names, stage names or glob patterns); all if none."""
    if not targets:
        return list(items)
    chosen: list[Item] = []
    unknown: list[str] = []
    for target in targets:
        hits = [i for i in items if target in (i.name, i.group) or fnmatch.fnmatchcase(i.name, target)]
        if not hits:
            unknown.append(target)
        chosen.extend(h for h in hits if h not in chosen)
    if unknown:
        names = sorted({i.group for i in items})
        raise PipelineError(
            f"no stage matches {', '.join(map(repr, unknown))}",
            hints=[
                f"stages: {', '.join(names) or '(none)'}",
                "a target is a stage name, an item name (stage@...) or a glob such as 'benchmark@*-key3'",
            ],
        )
    return chosen


def persist_problem(paths: Sequence[str]) -> str:
    return (
        f"declare its outputs `persist: true` ({', '.join(paths)}): DVC deletes other outputs before it runs a "
        "stage, so a `dvc repro` re-run while the job runs would delete the job's work; the orchestrator removes "
        "stale outputs itself before it submits a new job"
    )


def jobs(items: Sequence[Item]) -> tuple[list[Job], list[tuple[str, str]]]:
    """The items that call ``orchestrator run``, and (item, problem) for those that try to."""
    found: list[Job] = []
    problems: list[tuple[str, str]] = []
    parse = _Parser()
    for item in items:
        if not _RUN.match(item.cmd):
            continue  # not ours, or another subcommand (e.g. `orchestrator report` after the matrix)
        if "\n" in item.cmd or "\r" in item.cmd:
            problems.append(
                (
                    item.name.replace("\n", "\\n").replace("\r", "\\r"),
                    "its cmd has a line break (from a matrix value or params?). DVC runs each line of a cmd as a "
                    "command of its own, so the value cannot reach the program whole: remove line breaks from the values",
                )
            )
            continue
        argv, syntax = cmdline.split_plain(item.cmd)
        if syntax:
            problems.append(
                (
                    item.name,
                    f"its cmd has shell syntax ({'; '.join(syntax)}). DVC runs a stage's cmd through a shell, "
                    "so an orchestrated command must be plain words and quotes: single-quote interpolated values in dvc.yaml",
                )
            )
            continue
        args = runargs.run_args_of(argv)
        if args is None:
            problems.append(
                (
                    item.name,
                    "its cmd looks like `orchestrator run ...` but is not plain words: write it as `orchestrator run [OPTIONS] -- COMMAND`",
                )
            )
            continue
        if item.removable:
            # Once per stage: a matrix would repeat it for every item.
            if not any(who == f"stage {item.group}" for who, _ in problems):
                problems.append((f"stage {item.group}", persist_problem(item.removable) + f" (e.g. in {item.name})"))
            continue
        try:
            job = Job(item, parse(args))
        except PipelineError as exc:
            problems.append((item.name, exc.headline))
            continue
        if job.spec.command and ASSIGNMENT.match(job.spec.command[0]):
            word = job.spec.command[0]
            problems.append(
                (
                    item.name,
                    f"its command starts with {word.split('=', 1)[0]}=..., a shell assignment, which no job can start "
                    f"(the words after `--` are a program and its arguments): write `orchestrator run -- env {word} ...`",
                )
            )
            continue
        found.append(job)
    return found, problems


class _Parser:
    """``runargs.parse_run_args`` of many items: the options before ``--`` are parsed once
    per distinct set (the items of a matrix share a few), the command after it is taken
    as it is, which is what the parser does with it."""

    _WHERE = "bad `orchestrator run` arguments"

    def __init__(self) -> None:
        self._specs: dict[tuple[str, ...], runargs.JobSpec | None] = {}

    def __call__(self, args: list[str]) -> runargs.JobSpec:
        cut = args.index("--") if "--" in args else -1
        options = tuple(args[:cut])
        if cut < 0 or cut == len(args) - 1 or (spec := self._options(options)) is None:
            return runargs.parse_run_args(args, self._WHERE)
        # Interned: the words items share ("python", "--model", a model's name) are then
        # held once, not once per item of a 100,000-item matrix.
        return dataclasses.replace(spec, command=tuple(map(sys.intern, args[cut + 1 :])))

    def _options(self, options: tuple[str, ...]) -> runargs.JobSpec | None:
        """The spec of ``options``, or None where the first ``--`` does not end them (it
        is an option's value, or the command started before it)."""
        if options not in self._specs:
            spec = runargs.parse_run_args([*options, "--", "command"], self._WHERE)
            ends = spec.command == ("command",) and runargs.parse_run_args([*options, "--", "--", "c"], self._WHERE).command == ("--", "c")
            self._specs[options] = spec if ends else None
        return self._specs[options]
