"""`orchestrator container build NAME --on-cluster`: build the image in a Slurm job of the profile's cluster.

On the cluster's login node (sbatch here, and Slurm's ClusterName the profile's), the build
job is planned (:mod:`orchestrator.containers.on_cluster`) and run
(:mod:`orchestrator.containers.build_job`) here. Anywhere else, the committed project goes
to the login node over ssh as `submit --remote` sends it (:mod:`orchestrator.cli.remote`),
the same command runs there with ``--here``, and the digest file it wrote there is read
back into this project's containers/NAME.digest (untouched when it holds the same line).
"""

from __future__ import annotations

import getpass
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from orchestrator.containers.build import IMAGES_DIR
from orchestrator.containers.images import CONTAINERS_DIR, ContainerError

CONTENT_PREFIX = "content-sha256:"


@dataclass(frozen=True)
class Request:
    """What the user asked for, as the options give it."""

    name: str | None
    force: bool
    digest_file: Path | None
    overrides: tuple[str, ...]
    replace_other_image: bool
    timeout: float | None = None  # --timeout when given: the build in the job gives up after it


def remote_digest(image: str) -> str:
    """Where the login node's call writes the digest, relative to the project there: under
    .orchestrator/ (ignored by git), so the cluster's checkout stays clean."""
    return f"{IMAGES_DIR}/{image}.on-cluster.digest"


def build_on_cluster(project: Path, cluster: str | None, request: Request, here: bool, remote: bool, with_changes: bool) -> None:
    from orchestrator.util.runner import SubprocessRunner

    runner = SubprocessRunner()
    if here:
        return _here(project, cluster, request, runner)
    if not remote:
        login_node, _ = _login_node_here(project, cluster, runner)
        if login_node:
            return _here(project, cluster, request, runner, checked=True)
    return _over_ssh(project, cluster, request, with_changes)


# --- on the login node ---------------------------------------------------------------------------


def _login_node_here(project: Path, cluster: str | None, runner):
    """Whether this machine submits to the profile's cluster (sbatch here, its ClusterName), and why not."""
    from orchestrator.config import params, profile
    from orchestrator.scripts import cluster_checks

    if runner.which("sbatch") is None:
        return False, "there is no sbatch on this machine"
    name = params.load(project).named_cluster(cluster)
    if name is None:
        return False, "params.yaml names no cluster"
    return cluster_checks.runs_here(profile.load(name).profile, runner)


def _here(project: Path, cluster: str | None, request: Request, runner, checked: bool = False) -> None:
    """Plan and run the build job from this login node (``checked``: the caller found it is one)."""
    from orchestrator.containers import build_job, images, on_cluster
    from orchestrator.scripts.workspace import Workspace

    ws = Workspace.open(project, cluster, runner)
    p = ws.profile.profile
    check_profile(p, ws.cluster)
    login_node, why = (True, "") if checked else _login_node_here(project, cluster, runner)
    if not login_node:
        raise ContainerError(f"--on-cluster --here builds from the login node of {ws.cluster}: {why}; leave out --here to go over ssh")
    account = ws.params.settings.account
    target = image_path(p.container.image, ws.root, account)
    name = _image_for(project, ws.cluster, ws.params.settings, request, str(target))
    image = images.select(project, name, request.overrides)
    guard_target(target, image.name, request.replace_other_image, lambda line: click.echo(line, err=True))
    digest_file = (request.digest_file or project / CONTAINERS_DIR / f"{image.name}.digest").absolute()
    beside = Path(sys.executable).with_name("orchestrator")
    this = on_cluster.orchestrator_argv(sys.executable, beside.is_file() and os.access(beside, os.X_OK))
    job = on_cluster.plan(
        p, image.name, str(target), ws.absolute_root, this, account, str(digest_file), request.force, request.overrides, request.timeout
    )

    def say(line: str) -> None:
        click.echo(line, err=True)

    def out(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    done = build_job.build_in_job(project, image, job, digest_file, runner, force=request.force, say=say, out=out)
    if done.job_id is None:
        click.echo(f"{done.image}: up to date ({done.target}, {done.content_hash}); digest in {_shown(done.digest_file)}")
    else:
        how = "followed" if done.followed else "built in"
        digest = _shown(done.digest_file)
        click.echo(f"{done.image}: {how} Slurm job {done.job_id}: {done.target} ({done.content_hash}); digest in {digest}")


def guard_target(target: Path, name: str, replace: bool, say) -> None:
    """Refuse to build over a file at ``target`` that holds another image (or one of unknown
    name) unless ``replace``: the rule `--push` follows (push.guard)."""
    from orchestrator.containers import identity
    from orchestrator.containers.push_target import guard

    if target.exists():
        guard(str(target), identity.identify(target), target, identity.Identity(name), replace, say)


def image_path(template: str | None, workspace: Path, account: str | None) -> Path:
    """The profile's container.image as a path here: this user's ${USER}, params' account, and
    this environment's variables filled in (a login node's ${SCRATCH} is the job's)."""
    from orchestrator.scripts import cluster_checks

    assert template is not None  # check_profile
    path = cluster_checks.image_location(template, workspace, getpass.getuser(), account)
    if path is None:
        raise ContainerError(
            f"container.image {template!r} refers to a variable this login node does not know"
            + ("" if account else " (params.yaml's orchestrator.account is not set, for ${SLURM_JOB_ACCOUNT})"),
            hints=["give the full path of the image on the cluster in a copy of the profile"],
        )
    return path


def _image_for(project: Path, cluster: str, settings, request: Request, target: str) -> str:
    from orchestrator.containers.destination import image_for

    return image_for(project, cluster, settings, request.name, request.replace_other_image, target, flag="--on-cluster")


def check_profile(p, cluster: str) -> None:
    """What an on-cluster build needs of the profile: one message for the first thing missing."""
    from orchestrator.containers.on_cluster import no_build_section

    hint = ["set it in a copy of the profile (orchestrator clusters show NAME --format yaml > mine.yaml; --cluster mine.yaml)"]
    if p.container.build is None:
        raise ContainerError(no_build_section(cluster), hints=hint)
    if not p.container.runtime:
        raise ContainerError(f"profile {cluster!r} names no container.runtime (apptainer or singularity) to build with", hints=hint)
    if not p.container.image:
        raise ContainerError(f"profile {cluster!r} names no container.image: the path its jobs read the image from", hints=hint)


def _shown(path: Path) -> str:
    from orchestrator.cli.options import display_path

    return display_path(path)


# --- from a workstation, over ssh ----------------------------------------------------------------


def _over_ssh(project: Path, cluster: str | None, request: Request, with_changes: bool) -> None:
    """The same command on the login node (sent first, as `submit --remote` does), then its digest read back."""
    from orchestrator.cli.remote import forwarded, open_session, say_line, send, stream_out
    from orchestrator.config import params, profile
    from orchestrator.containers import images
    from orchestrator.containers.build import write_digest
    from orchestrator.remote import destination
    from orchestrator.remote.session import command
    from orchestrator.util.runner import Stopped
    from orchestrator.util.ssh import RemoteError

    # Everything that can be refused here is, before anything is sent.
    prm = params.load(project)
    name = destination.named_cluster(prm, cluster, "--on-cluster")
    loaded = profile.load(name)
    check_profile(loaded.profile, loaded.name)
    settings = prm.for_cluster(name).settings
    image = _image_for(project, loaded.name, settings, request, loaded.profile.container.image or "")
    images.select(project, image, request.overrides)
    digest_file = (request.digest_file or project / CONTAINERS_DIR / f"{image}.digest").absolute()

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
    done = session.conn.run(command('cat -- "$1"', where))
    line = done.stdout.strip()
    if done.returncode != 0 or not line.startswith(CONTENT_PREFIX) or len(line.split()) != 1:
        raise RemoteError(f"the build there wrote no digest to read back: {session.dest.host}:{where}", hints=[done.stderr.strip()[-300:]])
    wrote = write_digest(digest_file, line, say_line)
    click.echo(f"{image}: digest {line} in {_shown(digest_file)}" + ("" if wrote else " (unchanged)"))


def _sets(overrides: Sequence[str]) -> list[str]:
    return [f"--set={item}" for item in overrides]
