"""`orchestrator container build NAME --on-cluster`: build the image in a Slurm job of the profile's cluster.

On the cluster's login node (sbatch here, and Slurm's ClusterName the profile's), the build
job is planned and run here (:func:`orchestrator.containers.cluster_build.build_here`).
Anywhere else, the committed project goes to the login node over ssh as `submit --remote`
sends it (:mod:`orchestrator.cli.remote`), the same command runs there with ``--here``, and
the digest file it wrote there is read back into this project's containers/NAME.digest
(untouched when it holds the same line). This module picks the way and prints.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import click

from orchestrator.containers.cluster_build import Request, remote_digest


def build_on_cluster(project: Path, cluster: str | None, request: Request, here: bool, remote: bool, with_changes: bool) -> None:
    from orchestrator.containers.cluster_build import login_node_here
    from orchestrator.util.runner import SubprocessRunner

    runner = SubprocessRunner()
    if here:
        return _here(project, cluster, request, runner)
    if not remote:
        login_node, _ = login_node_here(project, cluster, runner)
        if login_node:
            return _here(project, cluster, request, runner, checked=True)
    return _over_ssh(project, cluster, request, with_changes)


# --- on the login node ---------------------------------------------------------------------------


def _here(project: Path, cluster: str | None, request: Request, runner, checked: bool = False) -> None:
    """Plan and run the build job from this login node (``checked``: the caller found it is one)."""
    from orchestrator.containers.cluster_build import build_here

    def say(line: str) -> None:
        click.echo(line, err=True)

    def out(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    done = build_here(project, cluster, request, runner, say, out, checked=checked)
    if done.job_id is None:
        click.echo(f"{done.image}: up to date ({done.target}, {done.content_hash}); digest in {_shown(done.digest_file)}")
    else:
        how = "followed" if done.followed else "built in"
        digest = _shown(done.digest_file)
        click.echo(f"{done.image}: {how} Slurm job {done.job_id}: {done.target} ({done.content_hash}); digest in {digest}")


def _shown(path: Path) -> str:
    from orchestrator.cli.options import display_path

    return display_path(path)


# --- from a workstation, over ssh ----------------------------------------------------------------


def _over_ssh(project: Path, cluster: str | None, request: Request, with_changes: bool) -> None:
    """The same command on the login node (sent first, as `submit --remote` does), then its digest read back."""
    from orchestrator.cli.remote import forwarded, open_session, say_line, send, stream_out
    from orchestrator.config import params
    from orchestrator.containers.build import write_digest
    from orchestrator.containers.cluster_build import digest_line, prepare_remote
    from orchestrator.remote import destination
    from orchestrator.remote.session import command
    from orchestrator.util.runner import Stopped

    # Everything that can be refused here is, before anything is sent.
    prm = params.load(project)
    name = destination.named_cluster(prm, cluster, "--on-cluster")
    image, digest_file = prepare_remote(project, prm, name, request)

    session, runner = open_session(project, cluster)
    send(session, runner, sync=True, with_changes=with_changes, busy=", its checkout builds")
    options = ["--on-cluster", "--here", f"--digest-file={remote_digest(image)}"]
    options += [*([f"--cluster={cluster}"] if cluster else []), *(["--force"] if request.force else [])]
    options += [*_sets(request.overrides), *(["--replace-other-image"] if request.replace_other_image else [])]
    options += [f"--timeout={request.timeout!r}"] if request.timeout is not None else []
    argv = ["container", *forwarded("build", options, [image])]
    say_line(f"running `orchestrator {' '.join(argv)}` on {session.dest.host} in {session.project}")
    try:
        code = session.run(argv, stream_out, say_line)
    except Stopped as stop:  # only the following stops: the command goes on there, detached
        say_line(f"stopped following; the build goes on on {session.dest.host}: run the same command again to follow it")
        stop.reported = True
        raise
    if code:
        sys.exit(code)
    where = f"{session.project}/{remote_digest(image)}"
    line = digest_line(session.conn.run(command('cat -- "$1"', where)), session.dest.host, where)
    wrote = write_digest(digest_file, line, say_line)
    click.echo(f"{image}: digest {line} in {_shown(digest_file)}" + ("" if wrote else " (unchanged)"))


def _sets(overrides: Sequence[str]) -> list[str]:
    return [f"--set={item}" for item in overrides]
