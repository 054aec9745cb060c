"""What `container build NAME --on-cluster` submits: the build job's plan and its script, pure.

On a login node, ``orchestrator container build NAME --on-cluster`` builds the image in a
Slurm job of the profile's ``container.build`` partition (:class:`~orchestrator.config.profile_schema.ContainerBuild`),
straight to the path its jobs read it from (``container.image``). The job runs the same
``container build`` with ``--out`` that path, so the content hash, the stamp beside the
image, the lock and the digest file are those of a local build: a build of the same inputs
here or there writes the same digest line.

This module computes the job (:func:`plan`) and its sbatch script (:func:`script`) from facts
passed in; no file, clock, environment or subprocess. Submitting and following it:
:mod:`~orchestrator.containers.build_job`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator import __version__
from orchestrator.config.profile_schema import Profile
from orchestrator.containers.build import IMAGES_DIR
from orchestrator.containers.images import ContainerError
from orchestrator.scripts import render
from orchestrator.scripts.quoting import join as shell_join
from orchestrator.util.patterns import DIRECTIVE_SAFE

JOB_PREFIX = "orchestrator-build-"


@dataclass(frozen=True)
class BuildJob:
    """One build job: where it runs, what it runs, where its output goes."""

    image: str  # the images.yaml name
    target: str  # absolute path of the image on the cluster (the profile's container.image, filled in)
    workspace: str  # the project's folder there: the job runs there
    account: str | None
    partition: str  # as Slurm knows it
    qos: str | None  # the partition's QOS (a queue that is a QOS of another partition: Frontier's debug)
    time: str
    cpus: int
    builder: str
    setup: tuple[str, ...]
    command: tuple[str, ...]  # the build, as argv
    profile: str  # its name, for the header

    @property
    def job_name(self) -> str:
        return JOB_PREFIX + self.image

    @property
    def output(self) -> str:
        """Slurm's output file, relative to the workspace (%j: the job id)."""
        return f"{IMAGES_DIR}/{self.image}.build-job-%j.out"

    def output_of(self, job_id: str) -> str:
        return self.output.replace("%j", job_id)


def plan(
    profile: Profile,
    image: str,
    target: str,
    workspace: str,
    orchestrator: Sequence[str],
    account: str | None,
    digest_file: str,
    force: bool = False,
    overrides: Sequence[str] = (),
    timeout: float | None = None,
) -> BuildJob:
    """The build job of ``image`` into ``target`` for ``profile`` (its ``container.build``),
    run with the ``orchestrator`` argv prefix (:func:`orchestrator_argv`); every problem at once, as one
    :class:`ContainerError`."""
    b = profile.container.build
    if b is None or b.partition is None:
        raise ContainerError(no_build_section(profile.name))
    part = profile.scheduler.partitions[b.partition]  # the profile's validation checked it is one
    directives = {"account": account, "image name": image}
    bad = [f"{what} {value!r}" for what, value in directives.items() if value is not None and not DIRECTIVE_SAFE.fullmatch(value)]
    if bad:
        raise ContainerError(f"cannot submit the build job: {', '.join(bad)} has characters Slurm directives cannot carry")
    if not Path(target).is_absolute():
        raise ContainerError(f"the image path {target!r} is not absolute: give container.image as an absolute path on the cluster")
    # Each option's value in its own word with it, and the image after `--`: no value can become an option.
    command = [*orchestrator, "container", "build", f"--out={target}", f"--digest-file={digest_file}", f"--builder={b.builder}"]
    command += [*(["--force"] if force else []), *([f"--timeout={timeout!r}"] if timeout is not None else [])]
    command += [*(f"--set={item}" for item in overrides), "--", image]
    return BuildJob(
        image=image,
        target=target,
        workspace=workspace,
        account=account,
        partition=part.slurm_partition or b.partition,
        qos=part.qos,
        time=b.time,
        cpus=b.cpus,
        builder=b.builder,
        setup=b.setup,
        command=tuple(command),
        profile=profile.name,
    )


def orchestrator_argv(python: str, script_beside: bool) -> list[str]:
    """How the job runs this very orchestrator: the console script beside ``python`` (where
    ``script_beside``), else ``python -m orchestrator``. Not ``-m`` first: it puts the working
    directory first on sys.path, and a project holding an ``orchestrator/`` folder (this
    repository's own checkout) would run that copy instead of the installed one."""
    return [str(Path(python).with_name("orchestrator"))] if script_beside else [python, "-m", "orchestrator"]


def script(job: BuildJob) -> str:
    """The sbatch script of ``job`` (templates/container_build.sh.j2); byte-identical for one job."""
    return (
        render.environment()
        .get_template("container_build.sh.j2")
        .render(job=job, version=__version__, build=shell_join(job.command), by_hand=shell_join(["sbatch", script_name(job.image)]))
    )


def script_name(image: str) -> str:
    """The script's path relative to the workspace."""
    return f"{IMAGES_DIR}/{image}.build.sbatch"


def job_file(target: Path) -> Path:
    """Beside the image: the id of the last build job submitted for it."""
    return target.with_name(f".{target.name}.build-job")


def no_build_section(profile: str) -> str:
    return (
        f"profile {profile!r} says nowhere to build on the cluster: it has no container.build section "
        "(partition, and optionally time, cpus, builder: fakeroot or proot, setup)"
    )
