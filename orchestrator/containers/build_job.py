"""Running a build job on the login node: submit it unless the image is up to date, follow it, check what it left.

The plan and the script are :mod:`~orchestrator.containers.on_cluster`'s; this module does the
side effects, every command through a :class:`~orchestrator.util.runner.Runner` (tests fake
sbatch, squeue and sacct there):

1. the content hash of the inputs against the stamp beside the target: up to date (and no
   ``--force``), nothing is submitted, the digest file is written, done;
2. under a lock beside the image (two calls at once submit one job), the id recorded beside
   the image (``.<file>.build-job``): while Slurm still runs or queues that job, it is followed
   instead of submitting a second; else the script is written and submitted, its id recorded;
3. the job's output file is streamed until the job ends; a job that did not complete is one
   message naming it, its state and its output file (exit 1); one that did is checked by the
   stamp it left (the content hash it built), and the digest file is written from it.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.containers.build import freshness, write_digest
from orchestrator.containers.images import BuildError, ContainerError, Image
from orchestrator.containers.inputs import prepare
from orchestrator.containers.on_cluster import BuildJob, job_file, script, script_name
from orchestrator.slurm import commands
from orchestrator.slurm.states import JobInfo, State
from orchestrator.util import files
from orchestrator.util.runner import Runner, Stopped

SACCT_WAIT_S = 60.0  # slurmdbd may record a job that just ended a while later


@dataclass(frozen=True)
class BuildJobOutcome:
    image: str
    target: Path
    job_id: str | None  # None: up to date, nothing submitted
    followed: bool  # the job was submitted earlier (by another call), not by this one
    content_hash: str
    digest_file: Path


@dataclass
class BuildPollClock:
    """Polling: how long to sleep between looks at the job (grows to ``max_s``)."""

    sleep: Callable[[float], None] = time.sleep
    now: Callable[[], float] = time.monotonic
    first_s: float = 1.0
    max_s: float = 10.0


def build_in_job(
    project: Path,
    image: Image,
    job: BuildJob,
    digest_file: Path,
    runner: Runner,
    *,
    force: bool = False,
    say: Callable[[str], None] = lambda line: None,
    out: Callable[[str], None] = lambda text: None,
    clock: BuildPollClock | None = None,
) -> BuildJobOutcome:
    """Build ``image`` into ``job.target`` in a Slurm job unless it is up to date there (see the module doc)."""
    clock = clock or BuildPollClock()
    target = Path(job.target)
    prepared = prepare(project, image)
    fresh = freshness(prepared, target)
    if fresh.reason is None and not force:
        write_digest(digest_file, fresh.content_hash, say)
        return BuildJobOutcome(image.name, target, None, False, fresh.content_hash, digest_file)
    workspace = Path(job.workspace)
    reason = "--force" if force else fresh.reason
    for attempt in range(2):  # a followed job may have built other inputs: then one of our own
        job_id, followed = _submit_or_find(job, workspace, runner, say, reason)
        output = workspace / job.output_of(job_id)
        try:
            info = follow(job_id, output, runner, out, clock)
        except (Stopped, KeyboardInterrupt) as stop:  # only the following stops: the job is Slurm's
            say(f"{image.name}: stopped following build job {job_id}; it goes on (output: {output}); run the command again to follow it")
            if isinstance(stop, Stopped):
                stop.reported = True
            raise
        if info is None or info.state != State.COMPLETED:
            state = "an unknown state (neither squeue nor sacct knows it)" if info is None else _ended(info)
            raise BuildError(
                f"build job {job_id} ({job.job_name}) of image {image.name!r} ended {state}",
                hints=[f"its output: {output}", f"the build's log: {target.with_name(target.stem + '.build.log')}"],
            )
        fresh = freshness(prepared, target)
        if fresh.reason is None:
            write_digest(digest_file, fresh.content_hash, say)
            return BuildJobOutcome(image.name, target, job_id, followed, fresh.content_hash, digest_file)
        if not followed or attempt:
            raise BuildError(
                f"build job {job_id} ({job.job_name}) completed, but the image at {target} is not up to date: {fresh.reason}",
                hints=[f"its output: {output}"],
            )
        say(f"{image.name}: job {job_id} built other inputs ({fresh.reason}); submitting a build of these")
        force = False
    raise AssertionError("unreachable")


def _submit_or_find(job: BuildJob, workspace: Path, runner: Runner, say, reason: str | None) -> tuple[str, bool]:
    """The id of this image's build job still queued or running (followed), else of a new one."""
    record = job_file(Path(job.target))
    with files.locked(record.with_name(record.name + ".lock")):
        earlier = _recorded(record)
        if earlier is not None:
            info = query(earlier, runner, final_wait=0)
            if info is not None and info.state.active:
                say(f"{job.image}: build job {earlier} of this image is {info.state.value}: following it instead of submitting another")
                return earlier, True
        path = workspace / script_name(job.image)
        files.write_if_changed(path, script(job), mode=0o755)
        job_id = sbatch(path, workspace, runner)
        files.atomic_write(record, f"{job_id}\n")
    say(f"{job.image}: building ({reason}) in Slurm job {job_id} on partition {job.partition}; output: {job.output_of(job_id)}")
    return job_id, False


def _recorded(record: Path) -> str | None:
    try:
        text = record.read_text().strip()
    except OSError:
        return None
    return text if text.isdigit() else None


def sbatch(script_path: Path, workspace: Path, runner: Runner) -> str:
    argv = commands.sbatch_argv(str(script_path), str(workspace))
    try:
        done = runner.run(argv, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ContainerError(f"cannot run sbatch: {exc}; nothing was submitted") from exc
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()[-4:]
        raise ContainerError(f"sbatch refused the build job ({' '.join(argv)}); nothing was submitted", hints=said)
    try:
        return commands.parse_sbatch(done.stdout)
    except ValueError as exc:
        raise ContainerError(str(exc)) from exc


def query(job_id: str, runner: Runner, final_wait: float = SACCT_WAIT_S, clock: BuildPollClock | None = None) -> JobInfo | None:
    """The job as squeue knows it while Slurm holds it, else as sacct does (waiting up to ``final_wait``
    for slurmdbd to record it); None: neither knows it."""
    done = runner.run(commands.squeue_argv([job_id]), timeout=60)
    info = commands.parse_squeue(done.stdout).get(job_id) if done.returncode == 0 else None
    if info is not None:
        return info
    clock = clock or BuildPollClock()
    deadline = clock.now() + final_wait
    while True:
        done = runner.run(commands.sacct_argv([job_id]), timeout=60)
        info = commands.parse_sacct(done.stdout).get(job_id) if done.returncode == 0 else None
        if (info is not None and info.state.final) or clock.now() >= deadline:
            return info
        clock.sleep(2.0)


def follow(job_id: str, output: Path, runner: Runner, out: Callable[[str], None], clock: BuildPollClock) -> JobInfo | None:
    """Stream the job's output file to ``out`` as it grows, until the job ends; how it ended."""
    offset, wait = 0, clock.first_s
    while True:
        info = query(job_id, runner, final_wait=0, clock=clock)
        offset = _stream(output, offset, out)
        if info is None or info.state.final:
            break
        clock.sleep(wait)
        wait = min(wait * 2, clock.max_s)
    if info is None or not info.state.final:
        info = query(job_id, runner, clock=clock)
    _stream(output, offset, out, final=True)
    return info


def _stream(path: Path, offset: int, out: Callable[[str], None], final: bool = False) -> int:
    """What ``path`` holds beyond ``offset``, to ``out`` (whole lines, unless ``final``: a partial
    line waits for the next look); the new offset."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return offset
    end = len(data) if final else data.rfind(b"\n") + 1
    if end:
        out(data[:end].decode(errors="replace"))
    return offset + end


def _ended(info: JobInfo) -> str:
    code = f", exit {info.exit_code}" if info.exit_code not in (None, 0) else ""
    sig = f", signal {info.signal}" if info.signal else ""
    return f"{info.slurm_state}{code}{sig}"


def poll_max_s() -> float:
    """The longest wait between looks at the job: ORCH_POLL_MAX_S where set (the tests), else 10 s."""
    try:
        return max(0.1, float(os.environ.get("ORCH_POLL_MAX_S", "10")))
    except ValueError:
        return 10.0
