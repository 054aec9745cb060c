"""A submitit executor planned like ``orchestrator render``: notebooks submit functions.

``executor(folder, cluster="lumi", nodes=2, gpus_per_node=8).submit(fn)`` runs
``fn`` once per task, on the resources, CPU masks, environment and container the
same :func:`~orchestrator.scripts.plan.make_plan` gives a rendered sbatch script. Nothing
here decides a resource: the plan's directives and srun arguments are translated
to submitit's parameters, and the plan's own task function (rendered by the same
template macros as the scripts) starts submitit's python.

What submitit cannot take from the plan, and what it gets instead:

* ``--signal``: submitit's timeout/preemption handler listens for its own signal
  (USR2 unless SUBMITIT_PREEMPT_SIGNAL says otherwise), so the profile's signal
  name is not used; its lead time is (``signal_delay_s``).
* ``--output``/``--open-mode``: submitit writes its logs, and reads results,
  under ``folder`` (in append mode too), not under ``.orchestrator/logs``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.errors import PlanError
from orchestrator.pipeline.runargs import JobSpec
from orchestrator.scripts import render
from orchestrator.scripts.plan import Plan, make_plan
from orchestrator.scripts.quoting import Shell, join
from orchestrator.scripts.workspace import Workspace
from orchestrator.slurm import times
from orchestrator.util.runner import SubprocessRunner

if TYPE_CHECKING:  # submitit is imported when an executor is made: the CLI never pays for it
    import submitit

# Directives submitit writes itself, pointing at its folder (see the module docstring).
_SUBMITIT_OWNS = ("output", "open-mode")
# submitit appends its own arguments (-u -m submitit.core._submit FOLDER) to the
# python command; the task passes them on to the python it starts.
_ARGS = Shell('"$@"')
# What srun starts in every task: the plan's orch_task (environment, node-local
# dirs, container), exported by the setup lines, with submitit's arguments.
_LAUNCH = join(["bash", "-c", 'orch_task "$@"', "orch-task"])


def executor(
    folder: str | Path,
    *,
    cluster: str | None = None,
    project: str | Path = ".",
    nodes: int = 1,
    gpus_per_node: int = 1,
    time: str | None = None,
    partition: str | None = None,
    account: str | None = None,
    container: bool = True,
    name: str = "submitit",
) -> submitit.SlurmExecutor:
    """A SlurmExecutor for ``cluster`` (default: as ``orchestrator run`` picks it).

    ``folder`` holds submitit's pickles and logs: it must be visible from every
    node (it is also bound into the container). ``name`` is the job name and
    ``ORCH_ITEM``. Raises PlanError listing every way the request does not fit.
    """
    import submitit

    ws = Workspace.open(Path(project), cluster, SubprocessRunner(), form="sbatch")
    folder = Path(folder).expanduser().absolute()
    # Inside the container, its python (with the image's packages); on the host,
    # the notebook's own interpreter, as submitit does by default.
    python = "python" if container and ws.profile.profile.container.runtime else sys.executable
    spec = JobSpec(
        command=(python, _ARGS),
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        time=time,
        partition=partition,
        account=account,
        binds=(str(folder),),  # the task reads its pickled function and writes its result there
        container=container,
    )
    plan = make_plan(spec, name, "", ws.profile, ws.params.settings, ws.absolute_root, "sbatch")
    if plan.problems:
        raise PlanError(f"cannot make a submitit executor for {ws.cluster}", plan.problems)

    ex = submitit.SlurmExecutor(folder, python=_LAUNCH)
    # _valid_parameters: the names update_parameters accepts (what its own error message lists).
    named = submitit.SlurmExecutor._valid_parameters()
    ex.update_parameters(**_sbatch_parameters(plan, named), srun_args=list(plan.step_args), setup=_setup(plan))
    return ex


def _sbatch_parameters(plan: Plan, named: set[str]) -> dict[str, Any]:
    """The plan's sbatch directives as submitit parameters: its named ones where it
    has them, every other directive verbatim through ``additional_parameters``."""
    found: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for arg in plan.scheduler_args:
        key, has_value, value = arg.removeprefix("--").partition("=")
        if key in _SUBMITIT_OWNS:
            continue
        if key == "signal":
            found["signal_delay_s"] = int(value.rpartition("@")[2])
        elif key == "time":
            # submitit counts the limit in minutes (for its own timeout handling);
            # round up, since 0 minutes would mean no limit to Slurm. UNLIMITED: leave it out.
            limit = times.seconds(value)
            if math.isfinite(limit):
                found["time"] = math.ceil(limit / 60)
        elif key.replace("-", "_") in named:
            # Counts as ints: submitit multiplies nodes by tasks to know how many results to expect.
            found[key.replace("-", "_")] = (int(value) if value.isdigit() else value) if has_value else True
        else:
            extra[key] = value if has_value else True
    return {**found, "additional_parameters": extra} if extra else found


def _setup(plan: Plan) -> list[str]:
    """Batch-script lines before submitit's srun: the rendered scripts' hygiene
    (leaked container variables unset, cd to the workspace) and their task function.

    The task function, not these lines, exports the profile's environment and makes
    the node-local dirs: its ``${SLURM_NODEID}`` and friends must be each task's.
    """
    macros = render.environment().get_template("_common.sh.j2").module
    text = f"{macros.hygiene(plan)}\n\n{macros.task(plan)}\nexport -f orch_task"
    return text.splitlines()
