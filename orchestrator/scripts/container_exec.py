"""How a job's command runs in its container: the runtime, its flags (GPU, binds, working
directory, PYTHONPATH), the image and the setup run inside first."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from orchestrator.config.profile_schema import Profile
from orchestrator.pipeline.runargs import JobSpec
from orchestrator.scripts.quoting import Shell, quote, quote_runtime


@dataclass(frozen=True)
class ContainerExec:
    runtime: str
    flags: tuple[Shell, ...]  # one option (with its value) each: GPU flag, binds, working dir
    image: Shell
    setup: str  # shell code run inside the container before the command ("" if none)
    # params' own image file (orchestrator.image: x.sif), absolute: what `render --check` looks for
    # on the cluster (scripts.cluster_checks). None: the profile's container.image.
    file: str | None = None
    # The image's path as the profile or params give it (${USER}-style references unexpanded).
    path: str = ""


def container_exec(p: Profile, job: JobSpec, workspace: str, run_dir: Shell, problems: list[str], file: str | None) -> ContainerExec | None:
    """``file``: params' own image file (absolute, or relative to the workspace), run in place of the profile's image."""
    c = p.container
    if file is not None:
        file = posixpath.normpath(posixpath.join(workspace, file))
    elif not c.image:
        problems.append(f"profile {p.name} names a container runtime but no image (container.image)")
        return None
    flags: list[Shell] = []
    if c.gpu_flag and p.node.gpus and job.cpus is None:  # a CPU job asks for no GPU to pass in
        flags.append(Shell(c.gpu_flag))
    binds: list[Shell] = [quote_runtime(b) for b in c.binds]
    binds.append(quote(workspace))
    binds += [quote(b) for b in job.binds]
    if p.storage.workdir_root:
        binds.append(Shell('"$ORCH_WORKDIR"'))
    for path in (workspace, *job.binds):
        if "," in path or ":" in path:
            problems.append(f"cannot bind {path!r} into the container: apptainer bind paths may not contain ',' or ':'")
    flags += [Shell(f"--bind {b}") for b in binds]
    flags.append(Shell(f"--pwd {run_dir}"))
    # The job's code is the run dir's (the workspace or its staged copy), never a copy in the
    # image: first on PYTHONPATH, so `python experiments/x.py` imports it too. The runtime
    # expands ${PYTHONPATH} inside the container, to the image's own entries, kept after it
    # (none: no trailing ':', which would add the working directory); the host's does not get in.
    flags.append(Shell(f"--env PYTHONPATH={run_dir}" + "'${PYTHONPATH:+:$PYTHONPATH}'"))
    setup = "; ".join((*c.setup, 'exec "$@"')) if c.setup else ""
    image = quote(file) if file is not None else quote_runtime(c.image or "")
    return ContainerExec(runtime=c.runtime or "", flags=tuple(flags), image=image, setup=setup, file=file, path=file or c.image or "")
