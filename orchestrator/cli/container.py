"""`orchestrator container`: build the image jobs run in, and push it where they read it.

Building lives in :mod:`orchestrator.containers.build`, pushing in
:mod:`~orchestrator.containers.push`; this module parses the options, finds the push
target in the profile, and says what happened.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from orchestrator.cli.options import cluster_option, project_option
from orchestrator.containers.build import DEFAULT_TIMEOUT, IMAGES_DIR, build
from orchestrator.containers.images import CONTAINERS_DIR, ContainerError


@click.group()
def container() -> None:
    """Container images: build the image jobs run in (containers/images.yaml)."""


@container.command("build")
@click.argument("name", required=False)
@click.option("--force", is_flag=True, help="Build even when the image is up to date.")
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None, help=f"Image file [default: {IMAGES_DIR}/NAME.sif]."
)
@click.option(
    "--digest-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"Where the image's sha256 goes, for DVC [default: {CONTAINERS_DIR}/NAME.digest].",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a value of the image in images.yaml (e.g. base=/path/to/base.sif).",
)
@click.option("--timeout", type=float, default=DEFAULT_TIMEOUT, show_default=True, help="Give up on a build after this many seconds.")
@click.option("--push", is_flag=True, help="Then copy the image to the profile's container.image path on its push_host (rsync over ssh).")
@cluster_option("With --push: built-in profile name or profile file")
@click.option("--ssh-option", "ssh_options", multiple=True, help="With --push: an option for ssh (repeatable), e.g. --ssh-option=-p2222.")
@project_option
def build_command(name, force, output, digest_file, overrides, timeout, push, cluster, ssh_options, project) -> None:
    """Build image NAME of containers/images.yaml (default: ci) unless it is up to date.

    Up to date means: the image beside its stamp has the content hash of the
    rendered definition and every file it copies in. The build runs
    `apptainer build --fakeroot` (or singularity) into a temporary file and renames
    it into place only on success; the image's sha256 goes to the digest file.
    """
    import signal

    from orchestrator.util.runner import SubprocessRunner

    # SIGTERM (scancel, timeout) unwinds like Ctrl-C: the runtime is killed, the
    # temporary image and the staging folder are removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        result = build(
            project,
            name,
            SubprocessRunner(),
            output=output,
            digest_file=digest_file,
            force=force,
            overrides=overrides,
            timeout=timeout,
            say=lambda line: click.echo(line, err=True),
        )
    except OSError as exc:  # an unwritable image folder, a full disk (our own errors: the main CLI reports them)
        click.secho(f"error: {exc}", err=True, fg="red")
        sys.exit(1)
    where = _display(result.image)
    if result.built:
        click.echo(f"{result.name}: built {where} ({result.digest}, {result.seconds:.0f} s); digest in {_display(result.digest_file)}")
    else:
        click.echo(f"{result.name}: up to date ({where}, {result.digest})")
    if push:
        from orchestrator.containers import push as shipping

        target = push_target(project, cluster, SubprocessRunner())
        pushed = shipping.push(
            result.image, target, SubprocessRunner(), ssh_options=ssh_options, say=lambda line: click.echo(line, err=True)
        )
        how = f"{pushed.bytes_transferred} bytes sent ({pushed.method})" if pushed.transferred else "already there, nothing sent"
        click.echo(f"{result.name}: pushed to {target}: {how}; sha256 verified")


def push_target(project: Path, cluster: str | None, runner) -> str:
    """``host:path`` where jobs of the profile find the image (its container.image, with
    the account filled in from params.yaml)."""
    import getpass

    from orchestrator.containers import push as shipping
    from orchestrator.scripts.workspace import Workspace

    ws = Workspace.open(project, cluster, runner)
    c = ws.profile.profile.container
    if not (c.push_host and c.image):
        raise ContainerError(
            f"profile {ws.cluster!r} says nowhere to push: it needs container.push_host and container.image",
            hints=["set them in a copy of the profile (orchestrator clusters show NAME --format yaml)"],
        )
    user = c.push_host.split("@", 1)[0] if "@" in c.push_host else getpass.getuser()
    values = {"USER": user, **({"SLURM_JOB_ACCOUNT": ws.params.settings.account} if ws.params.settings.account else {})}
    return f"{c.push_host}:{shipping.remote_image_path(c.image, values)}"


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
