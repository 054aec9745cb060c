"""A command run by hand in a built image the way a job of the profile runs its task
(`orchestrator container exec | shell`): the plan of an ad-hoc job
(:func:`~orchestrator.scripts.plan.make_plan`, so the same ``ContainerExec``: the profile's binds,
the workspace, ``--bind`` paths, ``--pwd``, the GPU flag and setup lines), with params' image
replaced by the built SIF, rendered through the job templates' own ``hygiene`` and ``task``
macros. Only what needs a Slurm step is left out: the requeue trap, rank 0's address and the
secrets check. On a profile without a container runtime (``local``, ``testbed``: their jobs run
on the host) the command gets the apptainer (or singularity) on PATH and the binds such a job
would get in a container.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.containers import catalog
from orchestrator.containers.images import ContainerError
from orchestrator.util.files import display_path

if TYPE_CHECKING:
    from orchestrator.config.profile_schema import Profile
    from orchestrator.scripts.plan import Plan
    from orchestrator.scripts.workspace import Workspace
    from orchestrator.util.runner import Runner

SESSION_ITEM = "container-exec"  # the ad-hoc job's name: ORCH_ITEM, the per-item folder on fast storage
# An interactive shell: bash where the image has it (as `apptainer shell` does), else sh;
# no rc files, whose prompt would hide the runtime's (Apptainer> ): this shell is in the image.
SHELL_COMMAND = ("/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash --norc -i; fi; exec sh -i")
# The job script's pieces a command started by hand gets: the templates' own macros.
SESSION_SCRIPT = """\
#!/bin/bash
{% import "_common.sh.j2" as common %}
# `orchestrator container {{ verb | raw }}`: a command in the image, as a job of profile {{ plan.profile | comment }} runs its task.
{{ common.hygiene(plan) | raw }}
{% for line in outside %}
{{ line }}
{% endfor %}

{{ common.task(plan) | raw }}

orch_task
"""


def built_image(project: Path, name: str | None, verb: str, command: Sequence[str]) -> Path:
    """The built SIF of image ``name``; one error for a missing or unknown name, a missing
    command or an image not built yet."""
    known = catalog.require_images_file(project)
    usage = "orchestrator container exec NAME -- COMMAND..." if verb == "exec" else "orchestrator container shell NAME"
    if not name:
        raise ContainerError(f"{verb} needs an image name: {usage}; images: {', '.join(known) or 'none'}")
    catalog.check_name(project, name)
    if not command:
        raise ContainerError(
            f"exec needs a command after the image name: orchestrator container exec {name} -- python -V "
            f"(for a shell: orchestrator container shell {name})"
        )
    sif = catalog.images_folder(project) / f"{name}{catalog.SIF}"
    if not sif.is_file():
        raise ContainerError(f"image {name!r} is not built yet (no {display_path(sif)}): run `orchestrator container build {name}`")
    return sif


def session_argv(
    ws: Workspace, sif: Path, command: Sequence[str], binds: Sequence[str], verb: str, runner: Runner, environ: Mapping[str, str]
) -> list[str]:
    """The argv that runs ``command`` in ``sif`` as ``ws``'s profile's job would (``verb``: exec or shell)."""
    plan = session_plan(ws, sif, command, binds, runner)
    script = session_script(plan, verb, outside_a_job(ws.profile.profile, ws.params.settings.account, environ))
    return ["bash", "-c", script, f"orchestrator-container-{verb}"]


def session_plan(ws: Workspace, sif: Path, command: Sequence[str], binds: Sequence[str], runner: Runner) -> Plan:
    """The plan of an ad-hoc job running ``command`` in ``sif`` on ``ws``'s profile."""
    from orchestrator.containers.build import find_runtime
    from orchestrator.pipeline import stages
    from orchestrator.pipeline.runargs import JobSpec

    loaded = ws.profile
    p = loaded.profile
    runtime = p.container.runtime or find_runtime(runner)
    if not runner.which(runtime):
        what = "load your site's module, or choose another profile with --cluster"
        raise ContainerError(f"profile {p.name!r} runs its jobs with {runtime}, which is not on PATH: {what}")
    if p.container.runtime is None:  # its jobs run on the host: here, in the image, with the binds such a job would get
        loaded = dataclasses.replace(loaded, profile=dataclasses.replace(p, container=dataclasses.replace(p.container, runtime=runtime)))
    settings = dataclasses.replace(ws.params.settings, image=str(sif.resolve()), secrets=())
    session = dataclasses.replace(ws, profile=loaded, params=dataclasses.replace(ws.params, settings=settings))
    item = stages.Item(SESSION_ITEM, SESSION_ITEM, "", (), working_dir(ws.root))
    plan = session.plan(stages.Job(item, JobSpec(command=tuple(command), binds=tuple(binds))), staged=False)
    # The scheduler's problems (account, partition, time) do not concern a command run here;
    # the container call's do (a bind path apptainer cannot take).
    problems = [q for q in plan.problems if "container" in q]
    if problems:
        raise ContainerError(f"cannot run image {sif.name} as a job of profile {p.name!r} would: {'; '.join(problems)}")
    # What needs a Slurm step (or the local script's launcher): the requeue trap, the ranks.
    return dataclasses.replace(plan, max_requeues=0, ranks=())


def working_dir(root: Path) -> str:
    """The current folder relative to the project, as an ad-hoc `orchestrator run` takes it; "" outside it."""
    here, top = Path.cwd().resolve(), root.resolve()
    return "" if here == top or not here.is_relative_to(top) else here.relative_to(top).as_posix()


def outside_a_job(p: Profile, account: str | None, environ: Mapping[str, str]) -> list[str]:
    """Shell lines giving the Slurm variables the profile's templates name (``/flash/${SLURM_JOB_ACCOUNT}``,
    ``-cache-${SLURM_NODEID}``) a value where ``environ`` has none, as outside a job: params'
    account, else 0. ``set -u`` would stop the task at the first unset one."""
    from orchestrator.scripts.quoting import quote, runtime_refs

    templates = [*p.environment.variables.values(), p.storage.workdir_root or "", p.storage.compile_cache or "", *p.container.binds]
    names = sorted({n for t in templates for n in runtime_refs(t) if n.startswith("SLURM_") and n not in environ})
    if "SLURM_JOB_ACCOUNT" in names and not account:
        raise ContainerError(
            f"profile {p.name!r} names ${{SLURM_JOB_ACCOUNT}}, which outside a Slurm job comes from params.yaml's "
            "orchestrator.account: set it there (or export SLURM_JOB_ACCOUNT)"
        )
    return [f'[ -n "${{{n}+set}}" ] || export {n}={quote(account if n == "SLURM_JOB_ACCOUNT" else "0")}' for n in names]


def session_script(plan: Plan, verb: str, outside: Sequence[str] = ()) -> str:
    from orchestrator.scripts import render
    from orchestrator.scripts.quoting import Shell

    template = render.environment().from_string(SESSION_SCRIPT)
    return template.render(plan=plan, verb=Shell(verb), outside=[Shell(line) for line in outside])
