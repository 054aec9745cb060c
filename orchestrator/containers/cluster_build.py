"""`container build NAME --on-cluster`, the decisions: what the profile must name, where the image
goes on the cluster, whether this machine is the cluster's login node, and the build job run from it.

On the login node (sbatch here, and Slurm's ClusterName the profile's), :func:`build_here`
plans the job (:mod:`~orchestrator.containers.on_cluster`) and runs it
(:mod:`~orchestrator.containers.build_job`). From a workstation the command goes to the login
node over ssh (the CLI's part, with the remote session); what is refused before anything is
sent is :func:`prepare_remote`'s, and the digest line that comes back is checked by
:func:`digest_line`.
"""

from __future__ import annotations

import getpass
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.containers.build import IMAGES_DIR
from orchestrator.containers.images import CONTAINERS_DIR, ContainerError
from orchestrator.util.runner import Completed, Runner
from orchestrator.util.ssh import RemoteError

if TYPE_CHECKING:
    from orchestrator.config.params import Params

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


def digest_path(project: Path, request: Request, image: str) -> Path:
    """This project's digest file for ``image``: --digest-file, else containers/NAME.digest."""
    return (request.digest_file or project / CONTAINERS_DIR / f"{image}.digest").absolute()


def login_node_here(project: Path, cluster: str | None, runner: Runner) -> tuple[bool, str]:
    """Whether this machine submits to the profile's cluster (sbatch here, its ClusterName), and why not."""
    from orchestrator.config import params, profile
    from orchestrator.scripts import cluster_checks

    if runner.which("sbatch") is None:
        return False, "there is no sbatch on this machine"
    name = params.load(project).named_cluster(cluster)
    if name is None:
        return False, "params.yaml names no cluster"
    return cluster_checks.runs_here(profile.load(name).profile, runner)


def build_here(
    project: Path,
    cluster: str | None,
    request: Request,
    runner: Runner,
    say: Callable[[str], None],
    out: Callable[[str], None],
    checked: bool = False,
):
    """Plan and run the build job from this login node (``checked``: the caller found it is one);
    the job's outcome (:class:`~orchestrator.containers.build_job.BuildJobOutcome`)."""
    from orchestrator.containers import build_job, images, on_cluster
    from orchestrator.scripts.workspace import Workspace

    ws = Workspace.open(project, cluster, runner)
    p = ws.profile.profile
    check_profile(p, ws.cluster)
    login_node, why = (True, "") if checked else login_node_here(project, cluster, runner)
    if not login_node:
        raise ContainerError(f"--on-cluster --here builds from the login node of {ws.cluster}: {why}; leave out --here to go over ssh")
    account = ws.params.settings.account
    target = image_path(p.container.image, ws.root, account)
    name = _image_for(project, ws.cluster, ws.params.settings, request, str(target))
    image = images.select(project, name, request.overrides)
    guard_target(target, image.name, request.replace_other_image, say)
    digest_file = digest_path(project, request, image.name)
    beside = Path(sys.executable).with_name("orchestrator")
    this = on_cluster.orchestrator_argv(sys.executable, beside.is_file() and os.access(beside, os.X_OK))
    job = on_cluster.plan(
        p, image.name, str(target), ws.absolute_root, this, account, str(digest_file), request.force, request.overrides, request.timeout
    )
    return build_job.build_in_job(project, image, job, digest_file, runner, force=request.force, say=say, out=out)


def prepare_remote(project: Path, prm: Params, name: str, request: Request) -> tuple[str, Path]:
    """Everything a build over ssh can be refused for here, before anything is sent: the profile
    ``name`` (the cluster ``prm`` or --cluster names), the image and its overrides. The image's
    name and this project's digest file."""
    from orchestrator.config import profile
    from orchestrator.containers import images

    loaded = profile.load(name)
    check_profile(loaded.profile, loaded.name)
    settings = prm.for_cluster(name).settings
    image = _image_for(project, loaded.name, settings, request, loaded.profile.container.image or "")
    images.select(project, image, request.overrides)
    return image, digest_path(project, request, image)


def digest_line(done: Completed, host: str, where: str) -> str:
    """The digest line the login node's build wrote (``done``: reading ``where`` there), or why there is none."""
    line = done.stdout.strip()
    if done.returncode != 0 or not line.startswith(CONTENT_PREFIX) or len(line.split()) != 1:
        raise RemoteError(f"the build there wrote no digest to read back: {host}:{where}", hints=[done.stderr.strip()[-300:]])
    return line


def guard_target(target: Path, name: str, replace: bool, say: Callable[[str], None]) -> None:
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
