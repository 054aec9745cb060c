"""`orchestrator container`: build the image jobs run in, and push it where they read it.

Building lives in :mod:`orchestrator.containers.build`, pushing in
:mod:`~orchestrator.containers.push`; this module parses the options, finds the push
target in the profile and the image that goes there (the one params.yaml names for it,
see :func:`orchestrator.containers.destination.push_destination`), and says what happened.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import click

from orchestrator.cli.options import FiniteFloat, WholeGroup, cluster_option, display_path, given_or_old, old_spelling, project_option
from orchestrator.config.profile_schema import BUILDERS
from orchestrator.containers.build import DEFAULT_TIMEOUT, IMAGES_DIR, build
from orchestrator.containers.destination import PushDestination, push_destination  # noqa: F401  (PushDestination: its answer, for callers)
from orchestrator.containers.images import CONTAINERS_DIR, ContainerError

# --timeout's ceiling: far past any build, and a number every clock and Slurm job takes.
MAX_TIMEOUT = 7 * 24 * 3600


@click.group(cls=WholeGroup)
def container() -> None:
    """Container images: build the image jobs run in (containers/images.yaml)."""


def _stoppable(command):
    """SIGINT, SIGTERM and SIGHUP (Ctrl-C; `timeout`, scancel, a CI job cancelled; the terminal
    or SSH session closed) all unwind the command the same way: the runtime's process group
    is stopped, every ``finally`` removes what it made, and the exit status is 128 + the
    signal's number. The build says itself what the stop left; anything else stopped gets one line."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from orchestrator.util.runner import Stopped, stop_signals

        try:
            with stop_signals():
                return command(*args, **kwargs)
        except Stopped as stop:
            if not stop.reported:
                click.echo(f"stopped by {stop.name}", err=True)
            sys.exit(stop.exit_code)

    return wrapper


@container.command("build")
@click.argument("name", required=False)
@click.option("--force", is_flag=True, help="Build even when the image is up to date.")
@click.option(
    "--out",
    "-o",
    "output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    callback=given_or_old,
    show_default=f"{IMAGES_DIR}/NAME.sif",
    help="Image file.",
)
@old_spelling("--output", "output", "--out (-o)", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--digest-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    show_default=f"{CONTAINERS_DIR}/NAME.digest",
    help="Where the image's content hash goes, for DVC.",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a value of the image in images.yaml (e.g. base=/path/to/base.sif).",
)
@click.option(
    "--timeout",
    type=FiniteFloat(min=0, min_open=True, max=MAX_TIMEOUT),
    default=DEFAULT_TIMEOUT,
    show_default=True,
    help="Give up on a build after this many seconds (at most a week).",
)
@click.option("--push", is_flag=True, help="Then copy the image to the profile's container.image path on its push_host (rsync over ssh).")
@cluster_option("With --push or --on-cluster: built-in profile name or profile file")
@click.option("--ssh-option", "ssh_options", multiple=True, help="With --push: an option for ssh (repeatable), e.g. --ssh-option=-p2222.")
@click.option(
    "--replace-other-image",
    is_flag=True,
    help="With --push or --on-cluster: push (build) NAME although the profile's jobs run another image, or over a file that "
    "holds another image (or one of unknown name).",
)
@click.option(
    "--on-cluster",
    is_flag=True,
    help="Build in a Slurm job of the profile's cluster (its container.build section), into its container.image path; "
    "from a workstation, over ssh on the login node as `submit --remote` does.",
)
@click.option("--remote", "-r", is_flag=True, help="With --on-cluster: go over ssh to the login node even where this machine has Slurm.")
@click.option("--with-changes", is_flag=True, help="With --on-cluster over ssh: also send the uncommitted changes.")
@click.option("--here", is_flag=True, hidden=True, help="With --on-cluster: this is the login node (what the ssh call runs there).")
@click.option("--builder", type=click.Choice(BUILDERS), default="fakeroot", hidden=True, help="How to build without root (the profile's).")
@project_option
@_stoppable
def build_command(
    name, force, output, digest_file, overrides, timeout, push, cluster, ssh_options, replace_other_image, on_cluster, remote, with_changes,
    here, builder, project,
) -> None:  # fmt: skip
    """Build image NAME of containers/images.yaml (default: ci; with --push, the image
    params.yaml's orchestrator.image names for the profile) unless it is up to date.

    Up to date means: the image beside its stamp has the content hash of the
    rendered definition and every file it copies in. The build runs
    `apptainer build --fakeroot` (or singularity) into a temporary file and renames
    it into place only on success; the image's content hash (content-sha256:...) goes to the digest file.

    With --on-cluster, the build runs in a Slurm job on the profile's container.build
    partition (builder fakeroot, or proot where the site has no user namespaces), straight
    into the path the profile's jobs read the image from; up to date there, nothing is
    submitted. From a workstation it goes to the login node over ssh (the project sent as
    `submit --remote` sends it), and the digest file comes back here.
    """
    from orchestrator.containers import progress
    from orchestrator.util.runner import SubprocessRunner

    if on_cluster:
        from orchestrator.cli import container_cluster
        from orchestrator.containers.cluster_build import Request

        clash = [flag for flag, given in (("--push", push), ("--out", output is not None)) if given]
        if clash:
            raise ContainerError(
                f"--on-cluster puts the image where the profile's jobs read it (container.image): leave out {' and '.join(clash)}"
            )
        given = None if timeout == DEFAULT_TIMEOUT else timeout  # the default is the build's own there too
        request = Request(name, force, digest_file, tuple(overrides), replace_other_image, given)
        return container_cluster.build_on_cluster(project, cluster, request, here, remote, with_changes)
    misplaced = [flag for flag, given in (("--remote", remote), ("--with-changes", with_changes), ("--here", here)) if given]
    if misplaced:
        raise ContainerError(f"{' and '.join(misplaced)}: only with --on-cluster (add it, or leave them out)")

    destination = push_destination(project, cluster, name, replace_other_image, SubprocessRunner()) if push else None
    if destination is not None:
        name = destination.image  # checked before building: a refused push builds nothing
    elif replace_other_image:
        raise ContainerError("--replace-other-image is for --push only: add --push, or leave it out")
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
            display=progress.Terminal() if sys.stderr.isatty() else None,  # else one line per phase
            builder=builder,
        )
    except OSError as exc:  # an unwritable image folder, a full disk (our own errors: the main CLI reports them)
        click.secho(f"error: {exc}", err=True, fg="red")
        sys.exit(1)
    where = display_path(result.image)
    size = progress.size_text(result.image.stat().st_size)
    if result.built:
        took = f"{result.seconds:.0f} s"
        click.echo(f"{result.name}: built {where} ({size}, {result.digest}, {took}); digest in {display_path(result.digest_file)}")
    else:
        click.echo(f"{result.name}: up to date ({where}, {size}, {result.digest})")
    if destination is not None:
        from orchestrator.containers import push as shipping

        target = destination.target
        pushed = shipping.push(
            result.image,
            target,
            SubprocessRunner(),
            ssh_options=ssh_options,
            say=lambda line: click.echo(line, err=True),
            replace_other_image=replace_other_image,
        )
        how = f"{pushed.bytes_transferred} bytes sent ({pushed.method})" if pushed.transferred else "already there, nothing sent"
        click.echo(f"{result.name}: pushed to {target}: {how}; sha256 verified")


from orchestrator.cli import container_verbs  # noqa: E402  (list, exec, shell and clean; they do not import this module)

for _verb in (container_verbs.list_command, container_verbs.exec_command, container_verbs.shell_command, container_verbs.clean_command):
    container.add_command(_verb)
