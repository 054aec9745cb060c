"""`orchestrator render`: every matrix item's job script, written (and checked) without submitting."""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.cli.options import cluster_option, project_option, table
from orchestrator.errors import OrchestratorError, PipelineError

if TYPE_CHECKING:
    from orchestrator.scripts.plan import Form  # click's Choice gives one of its values


@click.command()
@click.argument("targets", nargs=-1)
@cluster_option()
@click.option(
    "--out",
    "-o",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    show_default=".orchestrator/scripts/CLUSTER",
    help="Output folder.",
)
@click.option(
    "--form", type=click.Choice(["sbatch", "srun", "local"]), default=None, show_default="the profile's launcher", help="Script form."
)
@click.option(
    "--check",
    "do_check",
    is_flag=True,
    help="Check every plan and script (bash -n, shellcheck) and, on the cluster, the image file; exit non-zero on any problem. "
    "A staged job (the profile's storage.workdir_root, params' orchestrator.stage_locally) must declare every project file "
    "its command names or imports.",
)
@click.option("--no-shellcheck", is_flag=True, help="With --check: skip shellcheck.")
@project_option
def render(
    targets: tuple[str, ...], cluster: str | None, out: Path | None, form: Form | None, do_check: bool, no_shellcheck: bool, project: Path
) -> None:
    """Write the job script of every matrix item that calls `orchestrator run`.

    TARGETS are stage names, item names (stage@...) or globs; default: all.
    Nothing is written unless every item could be planned (and, with --check,
    every script passed its checks).
    """
    from orchestrator.scripts import cluster_checks, costs, matrix, staged_deps
    from orchestrator.scripts.plan import safe_name
    from orchestrator.scripts.workspace import SCRIPTS_DIR
    from orchestrator.util.runner import SubprocessRunner

    runner = SubprocessRunner()
    with contextlib.ExitStack() as stack:
        if out is not None:  # checked before the matrix is planned, which takes minutes for a big one
            out_dir = _enter(stack, matrix.scripts_folder(out), out, "--out")
        rendered = matrix.render_matrix(project, cluster, runner, targets, form)
        if not rendered.plans:
            raise _nothing_orchestrated(project, targets)
        found = cluster_checks.Findings()
        if do_check:
            staged_deps.require(rendered.plans, rendered.profile.profile, f"cannot stage the jobs for cluster {rendered.profile.name!r}")
            found = cluster_checks.check(rendered.plans, rendered.profile, runner)
            for line in found.warnings:  # before the checks that may fail: they are worth seeing either way
                click.secho(f"warning: {line}", err=True, fg="yellow")
            rendered = matrix.check_or_raise(rendered, runner, shellcheck=not no_shellcheck, more=found.problems)
        if out is None:
            default = project / SCRIPTS_DIR / safe_name(rendered.profile.name)
            out_dir = _enter(stack, matrix.scripts_folder(default), default, "the scripts folder")
        try:
            matrix.write(rendered, out_dir, replace_all=not targets)
        except OSError as exc:
            raise _folder_error(exc, out_dir, "--out" if out is not None else "the scripts folder") from None
    summary(rendered.plans)
    for line in costs.warnings(rendered.plans):  # a warning, not a problem: the scripts are written
        click.secho(f"warning: {line}", err=True, fg="yellow")
    if (unswitched := _preview_only(project, cluster)) is not None:
        click.secho(f"warning: {unswitched}", err=True, fg="yellow")
    for group, device in sorted(rendered.devices.items()):
        click.echo(f"stage {group} on {device.accelerator.upper()}: {device.why}")
    for line in [*notes(rendered.plans), *found.notes]:
        click.echo(f"note: {line}")
    checked = " and checked" if do_check else ""
    click.echo(f"{len(rendered.scripts)} script(s) for {rendered.profile.name}{checked} in {out_dir}")


def _preview_only(project: Path, cluster: str | None) -> str | None:
    """Why these scripts are a preview only: params.yaml does not yet hold the cluster's values
    (clusters.NAME), so DVC would resolve another matrix and `orchestrator run` would refuse."""
    from orchestrator.config import params
    from orchestrator.errors import ConfigError

    prm = params.load(project)
    name = prm.named_cluster(cluster)
    if name is None:
        return None
    try:
        params.require_switched(prm, name, "run")
    except ConfigError:
        return (
            f"these scripts have {name}'s values (params.yaml's clusters entry), which params.yaml does not hold yet: "
            f"`dvc repro` would refuse to run them until `orchestrator use {name}` writes them there"
        )
    return None


def _nothing_orchestrated(project: Path, targets: tuple[str, ...]) -> PipelineError:
    """No item to render: no stage (of those named) runs through `orchestrator run`. "0 scripts,
    checked" would read as success on a project whose stages all run on this machine."""
    from orchestrator.pipeline import stages, wrap
    from orchestrator.util import yamlio

    found = wrap.stages_of(yamlio.load_file(project / stages.PIPELINE_FILE))
    named = [s for s in found if not targets or any(fnmatch.fnmatchcase(s.name, t.split("@")[0]) for t in targets)]
    which = f"none of the stages {' '.join(targets)} runs" if targets else f"no stage of {stages.PIPELINE_FILE} runs"
    shown = [f"stage {s.name}: cmd `{s.cmd}`" + (f" (init cannot wrap it: {s.problem})" if s.problem else "") for s in named]
    return PipelineError(
        f"{which} through `orchestrator run`: there is no job script to render",
        shown,
        hints=[
            f"a stage runs as a job when its cmd starts with `{wrap.PREFIX}`: `orchestrator init --wrap STAGE` "
            "(or --wrap-all) does it, keeping the rest of dvc.yaml"
        ],
    )


def _enter(stack: contextlib.ExitStack, folder, path: Path, what: str) -> Path:
    try:
        return stack.enter_context(folder)
    except OSError as exc:
        raise _folder_error(exc, path, what) from None


# Why a folder cannot take the scripts, for the errors paths give most often.
_REASONS = {
    # Folders are made with their parents, so a missing one means the file system refused it.
    errno.ENOENT: "the file system lets no folder be made there (a pseudo file system such as /proc?)",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EEXIST: "a part of the path is a file, not a folder",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "no permission to write there",
    errno.EPERM: "not permitted there (a pseudo or read-only file system such as /sys?)",
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.ENAMETOOLONG: "a name in the path is longer than the file system allows",
}


def _folder_error(exc: OSError, path: Path, what: str) -> OrchestratorError:
    """One line: which folder, what is wrong with it, what to do."""
    reason = _REASONS.get(exc.errno or 0, exc.strerror or str(exc))
    name = os.fsdecode(exc.filename) if exc.filename is not None else None
    if name and name != str(path) and ".orchestrator-probe." not in name:
        reason += f": {name!r}"
    todo = "give --out a folder you can write" if what == "--out" else "make it writable, or give --out a folder you can write"
    return OrchestratorError(f"{what} {str(path)!r}: cannot write the scripts there: {reason}; {todo}")


def notes(plans, shown: int = 3) -> list[str]:
    """One line per distinct note of the plans (fine, but worth knowing), naming its items."""
    by_note: dict[str, list[str]] = {}
    for p in plans:
        for note in p.notes:
            by_note.setdefault(note, []).append(p.item)
    return [
        ", ".join(items[:shown]) + (f" (+{len(items) - shown} more)" if len(items) > shown else "") + f": {note}"
        for note, items in by_note.items()
    ]


def summary(plans, limit: int = 40) -> None:
    """A row per item for small matrices; per layout for big ones (a table of
    thousands of rows helps no one and costs half a second)."""
    billed = any(p.billed for p in plans)  # the site's units an hour, where the profile states its billing
    asked = any(p.requests.shown() != "-" for p in plans)  # memory, QOS, ... of the stage's or the project's
    columns = ("nodes x tasks", "on", "partition", "time") + (("billed",) if billed else ()) + (("requests",) if asked else ())

    def row(p) -> tuple[str, ...]:
        cells = (f"{p.nodes}x{p.tasks_per_node}", p.accelerator, p.partition or "-", p.time or "-")
        return cells + ((p.billed or "-",) if billed else ()) + ((p.requests.shown(),) if asked else ())

    if len(plans) <= limit:
        table(("item", *columns), [(p.item, *row(p)) for p in plans])
        return
    counts: dict[tuple[str, ...], int] = {}
    for p in plans:
        counts[row(p)] = counts.get(row(p), 0) + 1
    table(("items", *columns), [(str(n), *key) for key, n in counts.items()])
