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

from orchestrator.config import params, profile, selection
from orchestrator.pipeline import stages
from orchestrator.scripts import render
from orchestrator.scripts.plan import Form, Plan, make_plan, safe_name
from orchestrator.util.runner import Runner

STATE_DIR = ".orchestrator"  # scripts, logs, ledger, caches: this workspace's, never committed
SCRIPTS_DIR = f"{STATE_DIR}/scripts"


@dataclass(frozen=True)
class Workspace:
    root: Path
    cluster: str
    profile: profile.LoadedProfile
    params: params.Params  # as they are with this cluster active
    overlay: Mapping[str, Any] = field(default_factory=dict)
    form: Form | None = None

    @classmethod
    def open(cls, root: Path, cluster: str | None, runner: Runner, form: Form | None = None) -> Workspace:
        _ignore_state(root)
        base = params.load(root)
        name = selection.select_cluster(cluster, base, runner)
        return cls(root, name, selection.load_profile(name), base.for_cluster(name), base.overlay_for(name), form)

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
        )

    def script_path(self, plan: Plan) -> Path:
        return self.root / SCRIPTS_DIR / safe_name(self.cluster) / render.filename(plan)

    @cached_property
    def jobs(self) -> dict[str, stages.Job]:
        """Every orchestrated item of the pipeline, by name (resolved once, on demand)."""
        found, _ = stages.jobs(self.items())
        return {j.item.name: j for j in found}

    def script_of(self, name: str) -> str:
        return render.render(self.plan(self.jobs[name]))


def _ignore_state(root: Path) -> None:
    """Keep git (and so DVC) away from our state folder, whatever the project's .gitignore says."""
    marker = root / STATE_DIR / ".gitignore"
    if not marker.exists() and (root / stages.PIPELINE_FILE).exists():
        marker.parent.mkdir(exist_ok=True)
        marker.write_text("# Written by orchestrator: scripts, logs and the ledger are local state.\n*\n")
