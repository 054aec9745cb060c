"""What breaks only on the cluster: `render --check`'s look at the files its jobs will need there.

The plan is pure, so it cannot look at files; this check does, after planning: the image
file params name (``orchestrator.image: /project/p/team.sif``,
:attr:`~orchestrator.config.params.Settings.image_file`). It often lives only on the cluster,
and rendering for LUMI on a laptop must work, so it is looked for only where the profile's
jobs run: this machine for a profile without a scheduler, a login node of the cluster whose
``ClusterName`` the profile names for a Slurm one. There a missing file is a problem (every
task would fail to start); anywhere else a note says it was not checked.

Files a staged job needs and its stage does not declare are looked for by
:mod:`~orchestrator.scripts.staged_deps`, which ``submit`` and ``run`` ask too.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
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
    return Findings(tuple(problems), tuple(placeholder_accounts(plans, loaded.profile)), tuple(notes))


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


def _who(items: list[str]) -> str:
    return ", ".join(items[:_SHOWN]) + (f" (+{len(items) - _SHOWN} more)" if len(items) > _SHOWN else "")
