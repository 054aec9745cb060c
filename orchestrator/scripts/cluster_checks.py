"""What breaks only on the cluster: `render --check`'s look at the files its jobs will need there.

The plan is pure, so it cannot look at files; these two checks do, after planning:

- **The image file params name** (``orchestrator.image: /project/p/team.sif``,
  :attr:`~orchestrator.config.params.Settings.image_file`). It often lives only on the cluster, and
  rendering for LUMI on a laptop must work, so it is looked for only where the
  profile's jobs run: this machine for a profile without a scheduler, a login node of
  the cluster whose ``ClusterName`` the profile names for a Slurm one. There a missing
  file is a problem (every task would fail to start); anywhere else a note says it was
  not checked.
- **Files a staged job's command names but its stage does not declare.** With staging
  (a profile with ``storage.workdir_root``), the job runs from a copy of the stage's
  deps and outs on fast storage, so ``python experiments/scripts/evaluate.py`` fails
  there when ``experiments`` is not a dep, while it works here. Only words of the
  command that are relative paths existing in the workspace are looked at. These are
  warnings, never failures: a word can be a path by accident (a dataset named like a
  folder), and what a program opens is not known from its arguments.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config.profile_schema import LoadedProfile, Profile
from orchestrator.scripts.plan import Plan
from orchestrator.scripts.plan_checks import placeholder_account
from orchestrator.slurm import config as slurm_config
from orchestrator.util.patterns import RUNTIME_REF
from orchestrator.util.runner import Runner

_SHOWN = 3  # items named per message, then "(+N more)"


@dataclass(frozen=True)
class Findings:
    problems: tuple[str, ...] = ()  # fail the check
    warnings: tuple[str, ...] = ()  # printed; the check still passes
    notes: tuple[str, ...] = ()  # what was not checked, and why


def check(plans: Sequence[Plan], loaded: LoadedProfile, runner: Runner) -> Findings:
    problems, notes = image_files(plans, loaded.profile, runner)
    return Findings(tuple(problems), tuple(placeholder_accounts(plans, loaded.profile) + undeclared(plans)), tuple(notes))


def placeholder_accounts(plans: Sequence[Plan], p: Profile) -> list[str]:
    """The profile's example account (scheduler.account_example) where the jobs would bill it: a
    warning under `render --check` (sbatch refuses an account the user is not in, or bills a
    stranger's), not a failure: a project's checks in CI render for clusters whose accounts only
    the cluster's own params overlay, or the login node, fill in."""
    by_account: dict[str, list[str]] = {}
    for plan in plans:
        if plan.account and placeholder_account(p, plan.account):
            by_account.setdefault(plan.account, []).append(plan.item)
    return [f"{_who(items)}: {placeholder_account(p, account)}" for account, items in by_account.items()]


# --- the image file ------------------------------------------------------------------------------


def image_files(plans: Sequence[Plan], p: Profile, runner: Runner) -> tuple[list[str], list[str]]:
    """(problems, notes) about the image files of ``plans``: missing ones where the jobs run."""
    wanted: dict[str, list[str]] = {}
    for plan in plans:
        if plan.container is not None and plan.container.file is not None:
            wanted.setdefault(plan.container.file, []).append(plan.item)
    if not wanted:
        return [], []
    here, why_not = runs_here(p, runner)
    if not here:
        return [], [f"image {f} not looked for: {why_not}; `render --check` on the cluster looks for it" for f in wanted]
    problems = [
        f"{_who(items)}: image file {f} does not exist on this machine, where {p.name}'s jobs run: every task would fail to start "
        "(params.yaml's orchestrator.image: give the path of the .sif as it is here)"
        for f, items in wanted.items()
        if not Path(f).is_file()
    ]
    return problems, []


def image_location(path: str, workspace: Path | str, user: str, account: str | None) -> Path | None:
    """Where an image path of a profile or params points from here: ``${USER}``,
    ``${SLURM_JOB_ACCOUNT}`` and this environment's variables filled in (a login node's
    ``${SCRATCH}`` is the job's), relative to the workspace; None when it names a variable only
    the job has."""
    known = {**os.environ, "USER": user, **({"SLURM_JOB_ACCOUNT": account} if account else {})}
    if any(name not in known for name in RUNTIME_REF.findall(path)):
        return None
    filled = Path(RUNTIME_REF.sub(lambda m: known[m.group(1)], path))
    return filled if filled.is_absolute() else Path(workspace) / filled


def missing_image(plan: Plan, user: str) -> str | None:
    """Why ``plan``'s job would fail to start for want of its image, checked where jobs are
    submitted from (a login node sees the cluster's file systems); None when the image is there
    or its path holds a reference only the job can expand."""
    if plan.container is None or not plan.container.path:
        return None
    path = image_location(plan.container.path, plan.workspace, user, plan.account)
    if path is None or path.is_file():
        return None
    return (
        f"the container image {path} does not exist: every task would fail to start "
        "(build and push it with `orchestrator container build NAME --push`, or fix the profile's container.image "
        "or params.yaml's orchestrator.image)"
    )


def runs_here(p: Profile, runner: Runner) -> tuple[bool, str]:
    """Whether jobs of ``p`` run on (or from) this machine; if not, why it is not known to."""
    if not p.uses_slurm:
        return True, ""
    if not p.scheduler.cluster_name:
        return False, f"profile {p.name} names no cluster_name to recognise its cluster by"
    config, why = slurm_config.read(runner, timeout=15)
    if config is None:
        return False, f"this is not a login node of {p.name} ({why})"
    actual = config.get("ClusterName")
    if actual != p.scheduler.cluster_name:
        return False, f"this is not a login node of {p.name} (Slurm's ClusterName here is {actual!r}, not {p.scheduler.cluster_name!r})"
    return True, ""


# --- files the command names but the stage does not declare ---------------------------------------


def undeclared(plans: Sequence[Plan]) -> list[str]:
    """One warning per stage and file: a staged command's word that is a file or folder of the
    workspace outside everything the job's copy holds."""
    by_file: dict[tuple[str, str, str], list[str]] = {}
    staged: dict[str, int] = {}  # items per stage
    exists: dict[str, bool] = {}
    covered: dict[tuple[str, tuple[str, ...]], bool] = {}
    for plan in plans:
        if plan.staging is None:
            continue
        stage = plan.item.split("@", 1)[0]
        staged[stage] = staged.get(stage, 0) + 1
        declared = plan.staging.inputs + plan.staging.in_place
        wdir = plan.workdir[len(plan.workspace) :].strip("/")
        for word in plan.command:
            rel = _relative_path(word, wdir)
            if rel is None:
                continue
            key = (rel, declared)
            if key not in covered:
                covered[key] = _covered(rel, declared)
            if covered[key]:
                continue
            where = f"{plan.workspace}/{rel}"
            if where not in exists:
                exists[where] = Path(where).exists()
            if exists[where]:
                by_file.setdefault((stage, word, rel), []).append(plan.item)
    profile = plans[0].profile if plans else ""
    found = []
    for (stage, word, rel), items in by_file.items():
        who = f"stage {stage}" + (f" (all {len(items)} items)" if len(items) > 1 else "") if len(items) == staged[stage] else _who(items)
        found.append(
            f"{who}: the command names {word}, which is not among the stage's deps: on {profile} the job runs from a copy of "
            f"its deps on fast storage (storage.workdir_root), where {rel} will be missing; add `- {posixpath.normpath(word)}` "
            "(or a folder above it) to the stage's deps in dvc.yaml"
        )
    return found


def _relative_path(word: str, wdir: str) -> str | None:
    """``word`` as a path from the project's root, when it can be a relative path inside it."""
    if not word or word.startswith(("-", "/", "~")) or "://" in word or any(ord(c) < 32 for c in word):
        return None
    rel = posixpath.normpath(posixpath.join(wdir, word))
    if rel == "." or rel == ".." or rel.startswith("../"):
        return None
    return rel


def _covered(rel: str, declared: Iterable[str]) -> bool:
    """Whether the job's copy holds ``rel``: it is a declared path, inside one, or a folder
    above one (then partly there: which of it the command reads is not known)."""
    parts = rel.split("/")
    for path in declared:
        dep = posixpath.normpath(path).split("/")
        n = min(len(dep), len(parts))
        if dep[:n] == parts[:n]:
            return True
    return False


def _who(items: list[str]) -> str:
    return ", ".join(items[:_SHOWN]) + (f" (+{len(items) - _SHOWN} more)" if len(items) > _SHOWN else "")
