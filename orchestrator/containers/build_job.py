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

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.containers.build import freshness, write_digest
from orchestrator.containers.images import BuildError, ContainerError, Image
from orchestrator.containers.inputs import prepare
from orchestrator.containers.on_cluster import BuildJob, job_file, script, script_name
from orchestrator.slurm.client import Refused, SchedulerError, SchedulerUnreachable, SlurmClient
from orchestrator.slurm.states import JobInfo, State
from orchestrator.util import files
from orchestrator.util.poll import Backoff, Clock, Poller
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


def polling() -> Backoff:
    """The waits between looks at the job: 1 s growing to 10 s (a build's output is shown as it
    comes), or as ORCH_POLL_FIRST_S and ORCH_POLL_MAX_S say."""
    return Backoff.from_environment(first_s=1.0, factor=2.0, max_s=10.0)


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
    clock: Clock | None = None,
    backoff: Backoff | None = None,
) -> BuildJobOutcome:
    """Build ``image`` into ``job.target`` in a Slurm job unless it is up to date there (see the
    module doc). ``backoff``: the waits between looks at the job (default :func:`polling`)."""
    clock = clock or Clock()
    backoff = backoff or polling()
    slurm = SlurmClient(runner)
    target = Path(job.target)
    prepared = prepare(project, image)
    fresh = freshness(prepared, target)
    if fresh.reason is None and not force:
        write_digest(digest_file, fresh.content_hash, say)
        return BuildJobOutcome(image.name, target, None, False, fresh.content_hash, digest_file)
    workspace = Path(job.workspace)
    reason = "--force" if force else fresh.reason
    for attempt in range(2):  # a followed job may have built other inputs: then one of our own
        job_id, followed = _submit_or_find(job, workspace, slurm, say, reason)
        output = workspace / job.output_of(job_id)
        try:
            info = follow(job_id, output, slurm, out, lambda line: say(f"{image.name}: {line}"), Poller(backoff, clock=clock))
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


def _submit_or_find(job: BuildJob, workspace: Path, slurm: SlurmClient, say, reason: str | None) -> tuple[str, bool]:
    """The id of this image's build job still queued or running (followed), else of a new one."""
    record = job_file(Path(job.target))
    with files.locked(record.with_name(record.name + ".lock")):
        earlier = _recorded(record)
        if earlier is not None:
            try:
                info = slurm.query([earlier]).get(earlier)
            except SchedulerUnreachable as exc:
                # Submitting blind could build the image twice at once, into the same file.
                raise ContainerError(
                    f"cannot tell whether build job {earlier} of image {job.image!r} still runs: {exc.headline}; nothing was submitted",
                    hints=["run the command again when the Slurm controller answers"],
                ) from exc
            if info is not None and info.state.active:
                say(f"{job.image}: build job {earlier} of this image is {info.state.value}: following it instead of submitting another")
                return earlier, True
        path = workspace / script_name(job.image)
        files.write_if_changed(path, script(job), mode=0o755)
        job_id = sbatch(path, workspace, slurm)
        files.atomic_write(record, f"{job_id}\n")
    say(f"{job.image}: building ({reason}) in Slurm job {job_id} on partition {job.partition}; output: {job.output_of(job_id)}")
    return job_id, False


def _recorded(record: Path) -> str | None:
    try:
        text = record.read_text().strip()
    except OSError:
        return None
    return text if text.isdigit() else None


def sbatch(script_path: Path, workspace: Path, slurm: SlurmClient) -> str:
    try:
        return slurm.submit(script_path, workspace, "the build job")
    except Refused as exc:
        said = (exc.stderr.strip() or exc.headline).splitlines()[-4:]
        raise ContainerError(f"sbatch refused the build job ({' '.join(exc.argv)}); nothing was submitted", hints=said) from exc
    except SchedulerError as exc:
        raise ContainerError(f"cannot run sbatch: {exc.headline}; nothing was submitted") from exc


def follow(
    job_id: str, output: Path, slurm: SlurmClient, out: Callable[[str], None], say: Callable[[str], None], poller: Poller
) -> JobInfo | None:
    """Stream the job's output file to ``out`` as it grows, until the job ends; how it ended (None:
    neither squeue nor sacct has known it for :data:`SACCT_WAIT_S`).

    While Slurm does not answer (the controller restarts, a command times out) the job is
    still Slurm's: that is said, once, and the looks go on until it answers again."""
    offset = 0
    unknown_since: float | None = None  # when both answered without the job (slurmdbd may lag its end)
    silent = False  # Slurm has not answered since it was last said
    while True:
        try:
            info = slurm.query([job_id]).get(job_id)
        except SchedulerUnreachable as exc:
            if not silent:
                say(f"cannot ask Slurm about build job {job_id} ({exc.headline}); still waiting for it")
            silent, info = True, None
        else:
            if silent:
                say(f"Slurm answers again: following build job {job_id}")
            silent = False
            now = poller.clock.now()
            unknown_since = None if info is not None else unknown_since if unknown_since is not None else now
            if info is None and unknown_since is not None and now - unknown_since >= SACCT_WAIT_S:
                break
        offset = _stream(output, offset, out)
        if info is not None and info.state.final:
            break
        poller.sleep()
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
