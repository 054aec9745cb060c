"""The recording job of a detached submission: once every job has ended, it records the
results in DVC (``orchestrator record``), submits the next wave where one waits, then runs
``dvc repro`` in attach-only mode (the profile's ``service_partition``; without one, the user
is told what to run by hand).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator import __version__
from orchestrator.jobs import backends, ledger
from orchestrator.jobs.batch import ItemJob
from orchestrator.scripts import render
from orchestrator.scripts.matrix import write_script
from orchestrator.scripts.quoting import join as shell_join
from orchestrator.scripts.workspace import SCRIPTS_DIR, Workspace
from orchestrator.slurm.states import State

RECORD_ITEM = "orchestrator:record"


# `orchestrator submit --next-wave`'s exit status when no item is left to submit: the
# recording job then runs the final `dvc repro` (0 means a further wave was submitted).
NO_WAVE_LEFT = 3


@dataclass(frozen=True)
class RecordingJob:
    """What the job run once every job has ended does: ``record`` (always), then ``then``
    and, last, ``record --repro-exit N`` (the status ``then`` exited with): items whose jobs
    did not succeed are listed, and only a real failure fails the job."""

    item: str  # its name in the ledger
    record: list[str]
    then: list[str] | None = None  # run in attach-only mode when given (`dvc repro`)
    targets: tuple[str, ...] = ()
    script: str = "record.sbatch"  # its file name under .orchestrator/scripts
    manual: tuple[str, ...] = ()  # what to run by hand instead (default: ``record``)
    does: str = "it records the results"
    # Items wait for room under MaxSubmitJobs: after recording, this submits the next wave
    # (exit 0) or finds none left (exit NO_WAVE_LEFT), and only then does ``then`` run.
    next_wave: list[str] | None = None
    waiting: int = 0  # items left for later waves (in its ledger record, for `orchestrator status`)

    @property
    def by_hand(self) -> str:
        return shell_join(self.manual or self.record)


def submit_recorder(
    ws: Workspace,
    backend: backends.SbatchBackend,
    job: RecordingJob,
    job_ids: list[str],
    now: Callable[[], float],
    say: Callable[[str], None],
) -> ItemJob | None:
    """The job that records results in DVC once every job has ended."""
    partition = ws.profile.profile.scheduler.service_partition
    if not job_ids:
        say(f"nothing new to wait for: run `{job.by_hand}` to record finished jobs")
        return None
    if partition is None:
        say(f"when the jobs end, run `{job.by_hand}`: {job.does}")
        return None
    book = ledger.Ledger(ws.root)
    with book.locked(job.item) as records:
        # Two submits of the same matrix share one recording job: a second
        # `dvc repro` would only collide with the first on DVC's lock.
        for rec in reversed(records.records):
            if rec.state.active and set(job_ids) <= set(rec.provenance.get("after", ())):
                info = backend.query([rec.job_id]).get(rec.job_id)
                if info is not None and info.state.active:
                    say(f"recording job {rec.job_id} (submitted earlier) records these jobs too")
                    return ItemJob(job.item, rec.job_id, True, info.state, tuple(job_ids))
        text = (
            render.environment()
            .get_template("record.sh.j2")
            .render(
                version=__version__,
                workspace=ws.absolute_root,
                account=ws.params.settings.account,
                partition=partition,
                dependency="afterany:" + ":".join(job_ids),
                log=".orchestrator/logs/record-%j.log",
                record=shell_join(job.record),
                repro=shell_join(job.then) if job.then else None,
                next_wave=shell_join(job.next_wave) if job.next_wave else None,
                no_wave_left=NO_WAVE_LEFT,
                profile=ws.cluster,
            )
        )
        script = ws.root / SCRIPTS_DIR / job.script
        write_script(script, text)
        (ws.root / ".orchestrator/logs").mkdir(parents=True, exist_ok=True)  # Slurm opens the log first (a sweep submits nothing else here)
        try:
            job_id = backend.sbatch(script, ws.absolute_root, job.item)
        except backends.Refused as exc:
            raise backends.SchedulerError(
                f"the recording job was refused: {exc.stderr.strip()}", hints=[f"the jobs are submitted; run `{job.by_hand}` when they end"]
            ) from exc
        records.append(
            ledger.Record(
                item=job.item,
                fingerprint="",
                backend="slurm",
                job_id=job_id,
                profile=ws.cluster,
                script=os.path.relpath(script, ws.root),
                submitted_at=now(),
                log=f".orchestrator/logs/record-{job_id}.log",
                provenance={"after": list(job_ids), "targets": list(job.targets), **({"waiting": job.waiting} if job.waiting else {})},
            )
        )
    goes_on = ", then submits the next wave" if job.next_wave else ""
    say(f"recording job {job_id} records the results when they end{goes_on} (log .orchestrator/logs/record-{job_id}.log)")
    return ItemJob(job.item, job_id, False, State.PENDING, tuple(job_ids))
