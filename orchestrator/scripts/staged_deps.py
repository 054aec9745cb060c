"""Files a staged job needs that its stage does not declare.

A staged job (a profile with ``storage.workdir_root``, or ``orchestrator.stage_locally`` on
this machine) runs from a copy of its stage's deps and outs, and of nothing else. What works
in the workspace can then fail after the queue wait: ``from utils import sigmoid`` in
``src/train.py`` with ``src/utils.py`` undeclared ends in an ImportError there. Two kinds of
file are looked for, in the workspace, after planning (the plan is pure: it cannot read files):

- what the command's Python programs import from the project (:mod:`~orchestrator.scripts.imports`:
  a script's, ``python -m NAME``'s, resolved over the job's ``sys.path``), and
- the words of the command that are paths existing in the project (``python train.py
  --config conf/a.yaml``).

``render --check``, ``submit`` and ``orchestrator run`` refuse such a job (:func:`require`),
naming the files and the dep lines that fix it.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Sequence
from pathlib import Path

from orchestrator.config.profile_schema import Profile
from orchestrator.errors import PlanError
from orchestrator.pipeline.stages import PARAMS_FILE
from orchestrator.scripts.imports import Imports, programs
from orchestrator.scripts.plan import Plan

_SHOWN = 3  # items named per problem, then "(+N more)"
_FILES_SHOWN = 8  # files named per problem


def require(plans: Sequence[Plan], p: Profile, what: str) -> None:
    """PlanError (``what``: "cannot submit to lumi") naming every file a staged job of ``plans``
    needs and its stage does not declare."""
    problems = undeclared(plans, p)
    if problems:
        raise PlanError(
            what,
            problems,
            hints=["a staged job runs from a copy of its stage's deps and outs only (docs/explanation/staging.md)"],
        )


def undeclared(plans: Sequence[Plan], p: Profile) -> list[str]:
    """One problem per stage (or per set of its items) whose staged jobs need project files
    their stage does not declare."""
    finder = _Finder(plans[0].workspace if plans else ".", p)
    groups: dict[tuple[str, tuple[tuple[str, str], ...]], list[Plan]] = {}
    staged: dict[str, int] = {}  # items per stage
    for plan in plans:
        if plan.staging is None:
            continue
        stage = plan.item.split("@", 1)[0]
        staged[stage] = staged.get(stage, 0) + 1
        missing = finder.missing(plan)
        if missing:
            groups.setdefault((stage, missing), []).append(plan)
    found = []
    for (stage, missing), members in groups.items():
        items = [m.item for m in members]
        who = f"stage {stage}" + (f" (all {len(items)} items)" if len(items) > 1 else "") if len(items) == staged[stage] else _who(items)
        found.append(f"{who}: {_problem(members[0], missing)}")
    return found


def _problem(plan: Plan, missing: tuple[tuple[str, str], ...]) -> str:
    assert plan.staging is not None
    where = (
        f"on {plan.profile} the job runs from a copy of its stage's deps and outs on fast storage (storage.workdir_root)"
        if plan.form == "sbatch"
        else "with orchestrator.stage_locally the job runs from a copy of its stage's deps and outs, as on a cluster that stages"
    )
    listed = ", ".join(f"{path} ({why})" for path, why in missing[:_FILES_SHOWN])
    if len(missing) > _FILES_SHOWN:
        listed += f" (+{len(missing) - _FILES_SHOWN} more)"
    wdir = _wdir(plan)
    as_dep = lambda path: posixpath.relpath(path, wdir) if wdir else path  # noqa: E731  dvc.yaml's deps are relative to the wdir
    # The deps as dvc.yaml lists them: the params file DVC adds for a `params:` section is not one.
    declared = [i for i in (*plan.staging.inputs, *plan.staging.in_place) if i not in plan.staging.outputs and i != PARAMS_FILE]
    files = [path for path, _ in missing]
    fix = f"`deps: [{', '.join(dict.fromkeys(as_dep(d) for d in [*declared, *files]))}]`"
    folder = posixpath.commonpath([posixpath.dirname(path) for path in files])
    if folder and folder != wdir:
        kept = [as_dep(d) for d in declared if not _inside_any(d, [folder])]
        fix += f", or the folder that holds them: `deps: [{', '.join([*kept, as_dep(folder)])}]`"
    return f"{where}, and it would lack {listed}: add them to the stage's deps in dvc.yaml, e.g. {fix}"


class _Finder:
    """What staged plans miss, remembered across the plans of a matrix: a 1,000-item matrix of
    one script walks its imports once and looks at each path once."""

    def __init__(self, workspace: str, p: Profile) -> None:
        self.workspace = workspace
        self.imports = Imports(workspace)
        self.pythonpath = p.environment.variables.get("PYTHONPATH", "")
        self._exists: dict[str, bool] = {}
        self._missing: dict[tuple, tuple[tuple[str, str], ...]] = {}

    def missing(self, plan: Plan) -> tuple[tuple[str, str], ...]:
        """(path, why it is needed) of each file ``plan``'s job needs outside its copy, sorted."""
        assert plan.staging is not None
        declared = plan.staging.inputs + plan.staging.in_place
        key = (plan.command, plan.workdir, declared, plan.container is not None)
        if key not in self._missing:
            self._missing[key] = self._find(plan, declared)
        return self._missing[key]

    def _find(self, plan: Plan, declared: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
        wdir = _wdir(plan)
        named = [rel for word in plan.command if (rel := _relative_path(word, wdir)) is not None and self._is(rel)]
        found: dict[str, str] = {rel: "named by the command" for rel in named if not _covered(rel, declared)}
        scripts = [rel for rel in named if rel.endswith(".py") and os.path.isfile(os.path.join(self.workspace, rel))]
        for program in programs(plan.command, scripts):
            for needed in self.imports.closure(program, self._search(program.kind, program.name, wdir, plan.container is not None)):
                if needed.path not in found and not _inside_any(needed.path, declared):
                    found[needed.path] = f"imported by {needed.by}"
        return tuple(sorted(found.items()))

    def _search(self, kind: str, name: str, wdir: str, container: bool) -> list[str]:
        """The job's sys.path inside the project, relative to it: the script's folder (the
        working directory for ``-m``), then the run dir the container puts first on
        PYTHONPATH (scripts.container_exec), then the profile's own PYTHONPATH."""
        search = [posixpath.dirname(name) if kind == "script" else wdir]
        if container:
            search.append(wdir)
        search += [rel for entry in self.pythonpath.split(":") if (rel := self._pythonpath_entry(entry, wdir)) is not None]
        return list(dict.fromkeys(search))

    def _pythonpath_entry(self, entry: str, wdir: str) -> str | None:
        """A PYTHONPATH entry of the profile as a folder of the project (the staged copy's
        ``$ORCH_STAGE/...`` included); None for one outside it or naming another variable."""
        for stage in ("${ORCH_STAGE}", "$ORCH_STAGE", self.workspace):
            if entry == stage or entry.startswith(stage + "/"):
                entry, wdir = entry[len(stage) :].lstrip("/") or ".", ""
                break
        else:
            if not entry or "$" in entry or entry.startswith("/"):
                return None
        rel = posixpath.normpath(posixpath.join(wdir, entry))
        return None if rel == ".." or rel.startswith("../") else rel

    def _is(self, rel: str) -> bool:
        if rel not in self._exists:
            self._exists[rel] = os.path.lexists(os.path.join(self.workspace, rel))
        return self._exists[rel]


def _wdir(plan: Plan) -> str:
    return plan.workdir[len(plan.workspace) :].strip("/")


def _relative_path(word: str, wdir: str) -> str | None:
    """``word`` as a path from the project's root, when it can be a relative path inside it."""
    if not word or word.startswith(("-", "/", "~")) or "://" in word or any(ord(c) < 32 for c in word):
        return None
    rel = posixpath.normpath(posixpath.join(wdir, word))
    if rel == "." or rel == ".." or rel.startswith("../"):
        return None
    return rel


def _covered(rel: str, declared: Iterable[str]) -> bool:
    """Whether the job's copy holds ``rel``, a path the command names: a declared path, inside
    one, or a folder above one (then partly there: which of it the command reads is not known)."""
    parts = rel.split("/")
    for path in declared:
        dep = posixpath.normpath(path).split("/")
        n = min(len(dep), len(parts))
        if dep[:n] == parts[:n]:
            return True
    return False


def _inside_any(rel: str, declared: Iterable[str]) -> bool:
    """Whether the file ``rel`` is a declared path or inside a declared folder."""
    parts = Path(rel).parts
    return any(parts[: len(dep)] == dep for dep in (Path(posixpath.normpath(d)).parts for d in declared))


def _who(items: list[str]) -> str:
    return ", ".join(items[:_SHOWN]) + (f" (+{len(items) - _SHOWN} more)" if len(items) > _SHOWN else "")
