"""`orchestrator container list | exec | shell | clean`: the verbs beside `build`.

``list`` and ``clean`` say what :mod:`orchestrator.containers.catalog` finds. ``exec`` and
``shell`` run a command in a built image the way a job of the profile runs its task: the
plan of an ad-hoc job (:func:`~orchestrator.scripts.plan.make_plan`, so the same
``ContainerExec``: the profile's binds, the workspace, ``--bind`` paths, ``--pwd``, the GPU
flag and setup lines), with params' image replaced by the built SIF, rendered through the
job templates' own ``hygiene`` and ``task`` macros (the leaked container variables unset,
the job's environment exported). Only what needs a Slurm step is left out: the requeue
trap, rank 0's address and the secrets check. On a profile without a container runtime
(``local``, ``testbed``: their jobs run on the host) the command gets the apptainer (or
singularity) on PATH and the binds such a job would get in a container.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.cli.options import cluster_option, display_path, given_or_old, old_spelling, project_option, table
from orchestrator.containers import catalog
from orchestrator.containers.images import ContainerError
from orchestrator.containers.progress import size_text
from orchestrator.util.runner import Process, Runner

if TYPE_CHECKING:
    from orchestrator.config.profile import Profile
    from orchestrator.scripts.plan import Plan
    from orchestrator.scripts.workspace import Workspace

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


def _runner() -> Runner:
    from orchestrator.util.runner import SubprocessRunner

    return SubprocessRunner()


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


# --- list ------------------------------------------------------------------------------------


@click.command("list")
@click.option("--json", "as_json", is_flag=True, callback=given_or_old, help="JSON for scripts instead of a table.")
@old_spelling("--format", "as_json", "--json", type=click.Choice(["table", "json"]), convert=lambda fmt: fmt == "json")
@project_option
def list_command(as_json: bool, project: Path) -> None:
    """Each image of containers/images.yaml: built or not, up to date or stale and why,
    its content hash and SIF sha256, size, age, and where it was last pushed."""
    found = catalog.entries(project)
    if as_json:
        click.echo(json.dumps([e.as_json() for e in found], indent=1))
        return
    rows = [
        (
            e.name,
            _state(e),
            _short(e.content_hash if e.built else e.current_hash),
            _short(e.sif_sha256),
            size_text(e.size) if e.size is not None else "-",
            catalog.human_age(e.age_s) if e.age_s is not None else "-",
            _pushed(e),
        )
        for e in found
    ]
    table(("image", "state", "content hash", "SIF sha256", "size", "age", "last pushed"), rows)


def _state(e: catalog.Entry) -> str:
    if e.state == "not built":
        return f"not built (orchestrator container build {e.name})"
    if e.state == "up to date":
        return "up to date"
    return f"{e.state}: {e.reason}"


def _short(digest: str | None) -> str:
    """``content-sha256:<hex>`` or ``sha256:<hex>`` -> the first 12 hex digits."""
    return digest.rsplit(":", 1)[-1][:12] if digest else "-"


def _pushed(e: catalog.Entry) -> str:
    if not e.pushes:
        return "never pushed"
    last = e.pushes[0]
    when = last.at
    try:
        when = catalog.human_age(max(0.0, time.time() - datetime.fromisoformat(last.at).timestamp())) + " ago"
    except ValueError:
        pass
    more = f" (+{len(e.pushes) - 1} more)" if len(e.pushes) > 1 else ""
    older = "" if e.pushed_here else ", an older build"
    return f"{last.target}, {when}{older}{more}"


# --- exec and shell ----------------------------------------------------------------------------


@click.command("exec", context_settings={"allow_interspersed_args": False})
@click.argument("name", required=False)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@cluster_option("Profile whose jobs' binds and environment the command gets")
@click.option("--bind", "binds", multiple=True, help="Extra directory to bind, as `orchestrator run --bind` (repeatable).")
@project_option
def exec_command(name: str | None, command: tuple[str, ...], cluster: str | None, binds: tuple[str, ...], project: Path) -> None:
    """Run COMMAND in image NAME as a job's task runs: `exec [OPTIONS] NAME [--] COMMAND...`.

    Options go before NAME (as for apptainer exec); everything after it is the
    command. The same binds (the profile's, the workspace, --bind), working directory (the
    current one, inside the project), cleared container variables and environment
    a job of the profile gets. The exit status is the command's.
    """
    if command[:1] == ("--",):
        command = command[1:]
    elif command and command[0].startswith("-"):
        raise ContainerError(f"{command[0]}: options go before the image name: orchestrator container exec [OPTIONS] {name} -- COMMAND...")
    sif = _built(project, name, "exec", command)
    sys.exit(run_session(project, cluster, name or "", sif, command, binds, "exec", _runner()))


@click.command("shell")
@click.argument("name", required=False)
@cluster_option("Profile whose jobs' binds and environment the shell gets")
@click.option("--bind", "binds", multiple=True, help="Extra directory to bind, as `orchestrator run --bind` (repeatable).")
@project_option
def shell_command(name: str | None, cluster: str | None, binds: tuple[str, ...], project: Path) -> None:
    """An interactive shell in image NAME, with the binds and environment a job gets (see exec)."""
    sif = _built(project, name, "shell", SHELL_COMMAND)
    sys.exit(run_session(project, cluster, name or "", sif, SHELL_COMMAND, binds, "shell", _runner()))


def _built(project: Path, name: str | None, verb: str, command: Sequence[str]) -> Path:
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


def run_session(
    project: Path, cluster: str | None, name: str, sif: Path, command: Sequence[str], binds: Sequence[str], verb: str, runner: Runner
) -> int:
    """Run ``command`` in ``sif`` as the profile's job would; its exit status."""
    from orchestrator.scripts.workspace import Workspace

    try:
        entry = catalog.entry(project, name)
        if entry.state == "stale":
            click.echo(f"note: image {name} is stale ({entry.reason}); `orchestrator container build {name}` rebuilds it", err=True)
    except ContainerError:  # an entry that does not validate may still have a usable image
        pass
    ws = Workspace.open(project, cluster, runner)
    plan = session_plan(ws, sif, command, binds, runner)
    script = session_script(plan, verb, outside_a_job(ws.profile.profile, ws.params.settings.account, os.environ))
    return _wait(runner.spawn(["bash", "-c", script, f"orchestrator-container-{verb}"]))


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
    item = stages.Item(SESSION_ITEM, SESSION_ITEM, "", (), _wdir(ws.root))
    plan = session.plan(stages.Job(item, JobSpec(command=tuple(command), binds=tuple(binds))), staged=False)
    # The scheduler's problems (account, partition, time) do not concern a command run here;
    # the container call's do (a bind path apptainer cannot take).
    problems = [q for q in plan.problems if "container" in q]
    if problems:
        raise ContainerError(f"cannot run image {sif.name} as a job of profile {p.name!r} would: {'; '.join(problems)}")
    # What needs a Slurm step: the requeue trap, rank 0's address from the node list.
    return dataclasses.replace(plan, max_requeues=0, master_addr_suffix="")


def _wdir(root: Path) -> str:
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


def _wait(child: Process) -> int:
    """The child's exit status, 128+N when signal N ended it. The terminal's Ctrl-C and Ctrl-\\
    reach the child (one process group): here they are ignored while it runs; a SIGTERM
    or SIGHUP to us ends it too."""
    handlers = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGQUIT)}
    for s in (signal.SIGTERM, signal.SIGHUP):
        handlers[s] = signal.signal(s, lambda *_: child.terminate())
    try:
        rc = child.wait()
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
    return rc if rc >= 0 else 128 - rc


# --- clean -------------------------------------------------------------------------------------


@click.command("clean")
@click.option("--dry-run", is_flag=True, help="Only print what would be removed.")
@click.option("--yes", "-y", is_flag=True, help="Remove without asking.")
@project_option
def clean_command(dry_run: bool, yes: bool, project: Path) -> None:
    """Remove old images (no longer in containers/images.yaml) and what stopped builds left.

    Prints each file with its size and the total first; removes them only with --yes
    or when you confirm on a terminal. Images of images.yaml stay, stale or not."""
    if dry_run and yes:
        raise ContainerError("--dry-run and --yes exclude each other: --dry-run only prints, --yes removes")
    plan = catalog.clean_plan(project)
    for name in plan.building:
        click.echo(f"{name}: a build is running; its files are left alone", err=True)
    rows = plan.rows
    if not rows:
        click.echo(f"nothing to clean in {display_path(plan.folder)}")
        return
    table(("path", "frees", "what"), [(display_path(path), size_text(size), what) for path, size, what in rows])
    total = size_text(plan.total)
    click.echo(f"{len(rows)} item{'s' if len(rows) != 1 else ''}, {total} in all")
    if dry_run:
        click.echo("dry run: nothing removed")
        return
    if not yes:
        if not _interactive():
            raise ContainerError("nothing removed: pass --yes to remove what is listed (--dry-run only lists it)")
        if not click.confirm(f"remove {'them' if len(rows) != 1 else 'it'} ({total})?", default=False):
            click.echo("nothing removed")
            return
    freed, skipped = catalog.remove(plan)
    for item in skipped:
        click.echo(f"kept {display_path(item.path)}: a build of {item.image} started meanwhile", err=True)
    click.echo(f"removed {len(rows) - len(skipped)} item{'s' if len(rows) - len(skipped) != 1 else ''}, freed {size_text(freed)}")
