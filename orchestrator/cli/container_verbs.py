"""`orchestrator container list | exec | shell | clean`: the verbs beside `build`.

``list`` and ``clean`` say what :mod:`orchestrator.containers.catalog` finds; ``exec`` and
``shell`` run a command in a built image as a job of the profile runs its task
(:mod:`orchestrator.containers.session` makes that script)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import click

from orchestrator.cli.options import cluster_option, display_path, given_or_old, old_spelling, project_option, table
from orchestrator.containers import catalog
from orchestrator.containers.images import ContainerError
from orchestrator.containers.progress import size_text
from orchestrator.containers.session import SHELL_COMMAND, built_image, session_argv
from orchestrator.util.runner import Process, Runner


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
    sif = built_image(project, name, "exec", command)
    sys.exit(run_session(project, cluster, name or "", sif, command, binds, "exec", _runner()))


@click.command("shell")
@click.argument("name", required=False)
@cluster_option("Profile whose jobs' binds and environment the shell gets")
@click.option("--bind", "binds", multiple=True, help="Extra directory to bind, as `orchestrator run --bind` (repeatable).")
@project_option
def shell_command(name: str | None, cluster: str | None, binds: tuple[str, ...], project: Path) -> None:
    """An interactive shell in image NAME, with the binds and environment a job gets (see exec)."""
    sif = built_image(project, name, "shell", SHELL_COMMAND)
    sys.exit(run_session(project, cluster, name or "", sif, SHELL_COMMAND, binds, "shell", _runner()))


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
    return _wait(runner.spawn(session_argv(ws, sif, command, binds, verb, runner, os.environ)))


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
