"""A DVC project opened for one cluster profile: the inputs every command shares.

``render``, ``run`` and ``submit`` all start here, so they choose the profile,
apply the params overlay and plan items in exactly one way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from orchestrator.config import params, selection
from orchestrator.config.profile_schema import LoadedProfile
from orchestrator.pipeline import stages
from orchestrator.scripts import devices, render
from orchestrator.scripts.plan import Form, Plan, make_plan, safe_name
from orchestrator.util.runner import Runner

STATE_DIR = ".orchestrator"  # scripts, logs, ledger, caches: this workspace's, never committed
SCRIPTS_DIR = f"{STATE_DIR}/scripts"


@dataclass(frozen=True)
class Workspace:
    root: Path
    cluster: str
    profile: LoadedProfile
    params: params.Params  # as they are with this cluster active
    overlay: Mapping[str, Any] = field(default_factory=dict)
    form: Form | None = None

    @classmethod
    def open(cls, root: Path, cluster: str | None, runner: Runner, form: Form | None = None) -> Workspace:
        _ignore_state(root)
        base = params.load(root)
        name = selection.select_cluster(cluster, base, runner)
        return cls(root, name, selection.load_profile(name, runner), base.for_cluster(name), base.overlay_for(name), form)

    @cached_property
    def absolute_root(self) -> str:
        """The project's absolute path, as scripts name it (a job may start anywhere); one
        string for all items (resolving it per item of a big matrix costs a stat per folder)."""
        return str(self.root.resolve())

    def items(self, targets: Sequence[str] = ()) -> list[stages.Item]:
        return stages.select(stages.resolve(self.root, self.overlay), targets)

    def plan(self, job: stages.Job, staged: bool = True) -> Plan:
        """``staged``: the item's deps and outs are known (a dvc.yaml item), so the job may
        run from a copy on fast storage; an ad-hoc job runs where it is."""
        item = job.item
        inputs = item.inputs if staged else None
        return make_plan(
            job.spec,
            item.name,
            item.wdir,
            self.profile,
            self.params.settings,
            self.absolute_root,
            self.form,
            inputs=inputs,
            outputs=item.outputs,
            # A CPU job (run --cpus) is CPU by what it asks for; the stage's choice is for GPU layouts.
            device=None if job.spec.cpus is not None else self.device(job, staged),
        )

    def know(self, jobs: Sequence[stages.Job]) -> None:
        """Tell the workspace every job of the stages it will plan (saves resolving them again)."""
        for job in jobs:
            group = job.item.group
            self._most_tasks[group] = max(self._most_tasks.get(group, 0), job.spec.gpus_per_node)

    def device(self, job: stages.Job, staged: bool = True) -> devices.Devices:
        """The devices of every item of ``job``'s stage: one choice per stage."""
        group = job.item.group
        if group not in self._devices:
            self._devices[group] = devices.choose(
                self.params.settings.accelerator, self.profile, group, lambda: self._stage_tasks(job, staged)
            )
        return self._devices[group]

    def _stage_tasks(self, job: stages.Job, staged: bool) -> int:
        group = job.item.group
        if group not in self._most_tasks:
            # A dvc.yaml item planned alone (`run` inside `dvc repro`): its stage's other items decide too.
            self.know(stages.jobs(stages.resolve_group(self.root, group, self.overlay))[0] if staged else [job])
        return max(self._most_tasks.get(group, 0), job.spec.gpus_per_node)

    @property
    def chosen_devices(self) -> dict[str, devices.Devices]:
        """The choices made so far, by stage."""
        return dict(self._devices)

    @cached_property
    def _most_tasks(self) -> dict[str, int]:
        return {}

    @cached_property
    def _devices(self) -> dict[str, devices.Devices]:
        return {}

    def script_path(self, plan: Plan) -> Path:
        return self.root / SCRIPTS_DIR / safe_name(self.cluster) / render.filename(plan)

    @property
    def jobs(self) -> dict[str, stages.Job]:
        """Every orchestrated item of the pipeline, by name (resolved once, on demand)."""
        return self._orchestrated[0]

    @property
    def item_problems(self) -> list[tuple[str, str]]:
        """(item or stage, problem) for each item that calls ``orchestrator run`` in a way that
        cannot be planned: it is in no :attr:`jobs`, so whoever submits must say why."""
        return self._orchestrated[1]

    @cached_property
    def _orchestrated(self) -> tuple[dict[str, stages.Job], list[tuple[str, str]]]:
        found, problems = stages.jobs(self.items())
        self.know(found)
        return {j.item.name: j for j in found}, problems

    def script_of(self, name: str) -> str:
        return render.render(self.plan(self.jobs[name]))


def _ignore_state(root: Path) -> None:
    """Keep git (and so DVC) away from our state folder, whatever the project's .gitignore says."""
    marker = root / STATE_DIR / ".gitignore"
    if not marker.exists() and (root / stages.PIPELINE_FILE).exists():
        marker.parent.mkdir(exist_ok=True)
        marker.write_text("# Written by orchestrator: scripts, logs and the ledger are local state.\n*\n")
