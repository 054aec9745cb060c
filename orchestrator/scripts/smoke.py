"""Smoke jobs: one short job per job shape, planned from an item's own job.

Pure, like :mod:`~orchestrator.scripts.plan`: the items of the selected stages are grouped by
shape (stage x nodes x tasks per node x devices x partition x image), and each shape's first item
is planned again with three changes only: the command is the smoke probe
(``orchestrator/jobs/smoke_probe.py``, run by path on every rank), the partition is the profile's
``scheduler.smoke_partition`` and the time limit is two minutes. Container, binds, CPU masks,
staging and environment come from the same :func:`~orchestrator.scripts.plan.make_plan`, so what
passes here is what the real job runs in. What each rank is to find is an :class:`Expect`, written
beside the script as JSON for the probe.

A shape is per stage: the entry module and the staged inputs are the stage's, and a shape shared
by two stages would test one stage's only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from orchestrator.config.params import Settings
from orchestrator.config.profile_schema import LoadedProfile
from orchestrator.pipeline import stages
from orchestrator.scripts import devices, render
from orchestrator.scripts.plan import Plan, make_plan
from orchestrator.scripts.workspace import STATE_DIR

SMOKE_DIR = f"{STATE_DIR}/smoke"  # the probe, each shape's script and expectations, the ranks' results, the verdicts
SMOKE_TIME = "00:02:00"  # long enough to start a container and import torch, short enough for any debug queue
PROBE_FILE = "probe.py"

# The interpreter's own options before `-m` or the script (python -u -X dev -m pkg).
_PYTHON_FLAGS_WITH_VALUE = frozenset({"-X", "-W", "-Q"})


@dataclass(frozen=True)
class Shape:
    """What a smoke job stands for: every item of ``stage`` that runs like this."""

    stage: str
    nodes: int
    tasks_per_node: int
    accelerator: str
    partition: str  # where the smoke job runs ("-" without Slurm)
    image: str  # the container image as the profile or params name it; "" on the host

    @property
    def key(self) -> str:
        """A file name for the shape: stable across runs, unique per shape."""
        text = "\0".join((self.stage, str(self.nodes), str(self.tasks_per_node), self.accelerator, self.partition, self.image))
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:10]
        stage = "".join(c if c.isalnum() or c in "._-" else "_" for c in self.stage)[:60]
        return f"{stage}-{self.nodes}x{self.tasks_per_node}-{digest}"

    @property
    def label(self) -> str:
        """``lm 2x4 gpu on dev-g`` (`` in orchestrator.sif`` with a container)."""
        image = f" in {posixpath.basename(self.image)}" if self.image else ""
        return f"{self.stage} {self.nodes}x{self.tasks_per_node} {self.accelerator} on {self.partition}{image}"


@dataclass(frozen=True)
class EntryPoint:
    """What the stage's command runs: a module (``python -m pkg.mod``), a script
    (``python train.py``), or neither (``kind`` none, ``name`` why it is not checked)."""

    kind: Literal["module", "script", "none"]
    name: str
    python: str = "python3"  # the command's interpreter, which the probe runs with


def entry_of(command: Sequence[str]) -> EntryPoint:
    """The entry of ``command`` as Python's own command line reads it."""
    if not command or not posixpath.basename(command[0]).startswith("python"):
        first = command[0] if command else ""
        return EntryPoint("none", f"the command runs {first!r}, not `python -m MODULE` or `python SCRIPT`")
    python, i = command[0], 1
    while i < len(command):
        arg = command[i]
        if arg == "-m" and i + 1 < len(command):
            return EntryPoint("module", command[i + 1], python)
        if arg.startswith("-m") and len(arg) > 2:
            return EntryPoint("module", arg[2:], python)
        if arg in ("-c", "-"):
            return EntryPoint("none", f"the command runs `python {arg}`, which has no module or script to import", python)
        if arg in _PYTHON_FLAGS_WITH_VALUE:
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        return EntryPoint("script", arg, python)
    return EntryPoint("none", "the command starts an interactive python", python)


@dataclass(frozen=True)
class Expect:
    """What every rank of a smoke job checks; the probe reads it as JSON."""

    shape: str  # the shape's label, for messages
    results: str  # the folder each rank writes rank-N.json into (absolute)
    world_size: int
    backend: Literal["nccl", "gloo"]
    visible_gpus: int | None  # the GPUs a rank must see (0: hidden); None: not checked (stand-in GPUs)
    masks: tuple[str, ...]  # the CPU mask of each local rank (hex); (): the plan binds none
    entry: EntryPoint
    container: bool  # the rank runs inside the profile's container
    binds: tuple[str, ...]  # the container's bind specs, ${VAR} references unexpanded (the probe expands them)
    workspace: str
    staged: bool  # the command runs from a copy on the profile's fast storage

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class SmokeJob:
    """One shape's smoke job: its plan, ready to render, and what its ranks check."""

    shape: Shape
    item: str  # the item whose job it is (the shape's first)
    items: tuple[str, ...]  # every selected item of the shape
    plan: Plan
    expect: Expect
    folder: str  # SMOKE_DIR/jobs/KEY, absolute: the script, expect.json and the ranks' results

    @property
    def script(self) -> str:
        return render.render(self.plan)

    @property
    def digest(self) -> str:
        """The script's hash: a verdict holds for the script it was made with."""
        return hashlib.sha256(self.script.encode("utf-8", "surrogatepass")).hexdigest()


def shape_of(job: stages.Job, plan: Plan, smoke_partition: str | None) -> Shape:
    """``job``'s shape, ``plan`` being its real plan."""
    partition = _partition(job, plan, smoke_partition) or "-"
    image = plan.container.path if plan.container else ""
    return Shape(job.item.group, plan.nodes, plan.tasks_per_node, plan.accelerator, partition, image)


def _partition(job: stages.Job, plan: Plan, smoke_partition: str | None) -> str | None:
    # A CPU job keeps its own (CPU) partition: the smoke partition is a GPU queue at every shipped site.
    return plan.partition if job.spec.cpus is not None or smoke_partition is None else smoke_partition


def group(jobs: Iterable[tuple[stages.Job, Plan]], smoke_partition: str | None) -> list[tuple[Shape, list[stages.Job]]]:
    """The shapes of ``jobs`` (each with its real plan), in the order of their first item, each with its items."""
    found: dict[Shape, list[stages.Job]] = {}
    for job, plan in jobs:
        found.setdefault(shape_of(job, plan, smoke_partition), []).append(job)
    return list(found.items())


def smoke_job(
    shape: Shape,
    jobs: Sequence[stages.Job],
    loaded: LoadedProfile,
    settings: Settings,
    workspace: str,
    device: devices.Devices | None,
) -> SmokeJob:
    """The smoke job of ``shape``: its first item's job, planned with the probe for command,
    in the smoke partition, for two minutes. Its plan's problems say why it cannot run."""
    job = jobs[0]
    folder = posixpath.join(workspace, SMOKE_DIR, "jobs", shape.key)
    entry = entry_of(job.spec.command)
    probe = (entry.python, posixpath.join(workspace, SMOKE_DIR, PROBE_FILE), posixpath.join(folder, "expect.json"))
    partition = None if shape.partition == "-" else shape.partition
    spec = dataclasses.replace(job.spec, command=probe, time=SMOKE_TIME, partition=partition)
    # Its own item name: its own job name, log and folder on fast storage, never the item's (which
    # may hold a checkpoint, or be in use by the item's running job).
    name = f"smoke-{shape.key}"
    # Staged like the item (its deps), but no output is copied in or back: a smoke job never touches them.
    plan = make_plan(
        spec, name, job.item.wdir, loaded, settings, workspace, "sbatch" if loaded.profile.uses_slurm else None,
        inputs=job.item.inputs, outputs=(), device=device,
    )  # fmt: skip
    expect = Expect(
        shape=shape.label,
        results=posixpath.join(folder, "ranks"),
        world_size=plan.nodes * plan.tasks_per_node,
        backend="nccl" if plan.accelerator == "gpu" else "gloo",
        visible_gpus=_visible_gpus(plan),
        masks=plan.binding.masks[: plan.tasks_per_node] if plan.binding else (),
        entry=entry,
        container=plan.container is not None,
        binds=_binds(loaded, job, workspace),
        workspace=workspace,
        staged=plan.staging is not None,
    )
    items = tuple(j.item.name for j in jobs)
    return SmokeJob(shape, job.item.name, items, plan, expect, folder)


def _visible_gpus(plan: Plan) -> int | None:
    """The GPUs a rank sees: every GPU of its node's allocation (the rank picks the one of its
    local rank, as the training does), none where the plan hides them; None where the plan's GPUs
    are stand-ins that only Slurm counts (node.processes_on: cpu)."""
    if plan.accelerator == "gpu":
        return plan.gpus_per_node
    if any(name == devices.HIDE_GPUS[0] for name, _ in plan.env):
        return 0
    return None


def _binds(loaded: LoadedProfile, job: stages.Job, workspace: str) -> tuple[str, ...]:
    """The container's binds as :func:`~orchestrator.scripts.container_exec.container_exec` passes them."""
    p = loaded.profile
    if not (p.container.runtime and job.spec.container):
        return ()
    found = [*p.container.binds, workspace, *job.spec.binds]
    if p.storage.workdir_root:
        found.append("${ORCH_WORKDIR}")
    return tuple(found)
