"""Where `container build --push` (or `--on-cluster`) puts an image, and which image of containers/images.yaml
that is: the one params.yaml's orchestrator.image names for the profile, at the profile's container.image path."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.containers.images import ContainerError


@dataclass(frozen=True)
class PushDestination:
    target: str  # host:path, where the profile's jobs read their image
    image: str  # the containers/images.yaml image that goes there


def push_destination(project: Path, cluster: str | None, name: str | None, replace_other_image: bool, runner) -> PushDestination:
    """Where `build --push` sends an image, and which one: the image params.yaml's
    orchestrator.image names for the profile (clusters.NAME merged), the one its jobs run
    from that path; never the default ``ci``. Another NAME only with ``replace_other_image``."""
    from orchestrator.scripts.workspace import Workspace

    ws = Workspace.open(project, cluster, runner)
    target = push_target(ws)
    return PushDestination(target, image_for(project, ws.cluster, ws.params.settings, name, replace_other_image, target))


def image_for(project: Path, cluster: str, settings, name: str | None, replace_other_image: bool, target: str, flag: str = "--push") -> str:
    """The images.yaml image that goes to ``target``, where profile ``cluster``'s jobs read
    theirs (params ``settings`` with the profile's overlay): params.yaml's orchestrator.image;
    NAME when it is that one, or with ``replace_other_image``. ``flag`` names the option in messages."""
    from orchestrator.config.params import NO_IMAGE
    from orchestrator.containers import images
    from orchestrator.containers.push_target import REPLACE_FLAG

    wanted = settings.image or NO_IMAGE
    try:
        known = images.names(project)
    except ContainerError:
        known = []
    if name is not None and name not in known:
        images.select(project, name)  # its own error: no such image, and the valid ones
    if name is None or wanted == name:
        if wanted == NO_IMAGE or settings.image_file:
            what = "'none' (tasks run on the host)" if wanted == NO_IMAGE else f"your own image file {wanted!r} (jobs read it where it is)"
            choices = f"one of: {', '.join(known)}" if known else "an image of containers/images.yaml"
            raise ContainerError(
                f"{flag}: params.yaml's orchestrator.image for profile {cluster!r} is {what}, so there is no containers/images.yaml "
                f"image to build and {'push' if flag == '--push' else 'place'}; set it to {choices} "
                f"(clusters.{cluster}.orchestrator.image for this profile only)"
            )
        return wanted
    if not replace_other_image:
        if wanted == NO_IMAGE:
            runs = "no image (params.yaml's orchestrator.image is 'none')"
        elif settings.image_file:
            runs = f"your own image file {wanted!r}, not the image at {target} (params.yaml's orchestrator.image)"
        else:
            runs = f"image {wanted!r} from {target} (params.yaml's orchestrator.image)"
        verb = "push" if flag == "--push" else "build"
        raise ContainerError(
            f"{flag}: profile {cluster!r} runs {runs}, you gave {name!r}; pass {REPLACE_FLAG} to {verb} it there anyway, "
            f"or set orchestrator.image: {name}"
        )
    return name


def push_target(ws) -> str:
    """``host:path`` where jobs of the workspace's profile find the image (its
    container.image, with the account filled in from params.yaml)."""
    import getpass

    from orchestrator.containers import push_target as shipping

    c = ws.profile.profile.container
    if not (c.push_host and c.image):
        raise ContainerError(
            f"profile {ws.cluster!r} says nowhere to push: it needs container.push_host and container.image",
            hints=["set them in a copy of the profile (orchestrator clusters show NAME --format yaml)"],
        )
    user = c.push_host.split("@", 1)[0] if "@" in c.push_host else getpass.getuser()
    values = {"USER": user, **({"SLURM_JOB_ACCOUNT": ws.params.settings.account} if ws.params.settings.account else {})}
    return f"{c.push_host}:{shipping.remote_image_path(c.image, values)}"
