"""Where an item's processes run: on GPUs or on CPU, decided by the plan, never by `auto`.

A training command left to pick its device (Lightning's ``--accelerator auto``) takes
the GPU whenever torch sees one, so on a workstation with one GPU a 1-device item
runs on it and a 2-device item of the same matrix fails, or worse, a scaling curve
mixes GPU and CPU points. The choice is therefore made once per stage, from what
every item of the stage asks for, and written into each item's script
(``ORCH_ACCELERATOR``, and the GPUs hidden from a CPU item's processes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from orchestrator.config.profile_schema import LoadedProfile

Accelerator = Literal["gpu", "cpu"]

# Hide every GPU from a CPU item's processes, whatever the command does with `auto`. On AMD,
# ROCR_VISIBLE_DEVICES is the lowest level (ROCr, under HIP): set, even empty, ROCr filters the GPUs
# by its list (ROCR-Runtime's flag.h: filter_visible_gpus_ = IsEnvVarSet("ROCR_VISIBLE_DEVICES")),
# so '' leaves none; with HIP_VISIBLE_DEVICES alone ROCr still opens every GPU under HIP's filter (each
# masks at its own level: ROCm/ROCR-Runtime#155). Other vendors ignore it: the script reads the same everywhere.
HIDE_GPUS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


@dataclass(frozen=True)
class Devices:
    accelerator: Accelerator
    why: str  # one line for `render` and the run's start
    problems: tuple[str, ...] = ()
    hide_gpus: bool = False  # a CPU item on a machine that has GPUs
    peak_tflops_bf16: float | None = None  # the local GPU's, when it is known


def cpu_job(cpus: int) -> Devices:
    """The devices of a CPU job (``orchestrator run --cpus N``): CPU, whatever its stage's
    other items or this machine have. Its GPUs are hidden even where it has none (a CPU
    partition's nodes), so the script says the same everywhere and nothing touches a GPU."""
    return Devices("cpu", f"a CPU job: one task of {cpus} core(s) per node, no GPU", hide_gpus=True)


def choose(setting: str | None, loaded: LoadedProfile, group: str, most_tasks: Callable[[], int]) -> Devices:
    """The devices of every item of stage ``group``. ``setting``: params.yaml's
    orchestrator.accelerator; ``most_tasks``: the most processes per node any item of
    the stage asks for (called only when the choice depends on it: it may resolve
    the whole stage)."""
    setting = setting or "auto"
    p = loaded.profile
    if p.uses_slurm or loaded.machine is None:  # the profile describes the nodes
        on = p.node.processes_on or ("gpu" if p.node.gpus else "cpu")
        if on == "gpu":
            if setting == "cpu":
                problem = f"orchestrator.accelerator is cpu, but {p.name} allocates a GPU per process; valid here: auto, gpu"
                return Devices("gpu", "", (problem,))
            return Devices("gpu", f"{p.node.gpus} GPU(s) per {p.name} node")
        if setting == "gpu":
            nodes = "have GPUs that are stand-ins (node.processes_on: cpu)" if p.node.gpus else "have no GPU"
            return Devices("cpu", "", (f"orchestrator.accelerator is gpu, but {p.name} nodes {nodes}; valid here: auto, cpu",))
        return Devices("cpu", f"{p.name} processes run on CPU")

    machine = loaded.machine
    if setting == "cpu":
        return Devices("cpu", "orchestrator.accelerator is cpu", hide_gpus=machine.gpus > 0)
    if not machine.gpus:
        if setting == "gpu":
            problem = f"orchestrator.accelerator is gpu, but {machine.describe()}; valid here: auto or cpu (CPU processes)"
            return Devices("cpu", "", (problem,))
        return Devices("cpu", machine.describe())
    needed = most_tasks()
    if needed <= machine.gpus:
        why = f"{machine.describe()}; its items ask for up to {needed} per node"
        return Devices("gpu", why, peak_tflops_bf16=machine.peak_tflops_bf16)
    if setting == "gpu":
        problem = (
            f"orchestrator.accelerator is gpu, but stage {group} asks for up to {needed} GPUs and {machine.describe()}; "
            "valid here: auto (all of the stage's items on CPU) or cpu, or fewer devices per item"
        )
        return Devices("gpu", "", (problem,))
    # One device for all of the stage's items: a curve never mixes GPU and CPU points.
    why = (
        f"{machine.describe()}, but its items ask for up to {needed} per node: all of them on CPU, so that no figure of the stage "
        "mixes devices (orchestrator.accelerator: gpu refuses instead)"
    )
    return Devices("cpu", why, hide_gpus=True)
