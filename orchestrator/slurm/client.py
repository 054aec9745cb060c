"""The one Slurm client: submit (``sbatch --parsable``), query (sacct first, squeue fill-in), cancel.

Job submission (:mod:`orchestrator.jobs.backends`) and image builds on the cluster
(:mod:`orchestrator.containers.build_job`) both go through it, so a failure is classified
once, here:

* :class:`SchedulerUnreachable`: the controller or the database did not answer (a command
  timed out, or sacct and squeue both failed): wait and ask again, it is no answer about the job;
* :class:`Refused`: sbatch answered and said no: no job was made;
* :class:`SchedulerError`: anything else (not a Slurm login node, sbatch printed no job id).

The argv and the parsers are :mod:`orchestrator.slurm.commands`; every command runs
through a :class:`~orchestrator.util.runner.Runner`.
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Sequence
from pathlib import Path

from orchestrator.errors import OrchestratorError
from orchestrator.slurm import commands, states
from orchestrator.slurm.states import JobInfo, State
from orchestrator.util.runner import Completed, Runner

SUBMIT_TIMEOUT_S = 120.0
QUERY_TIMEOUT_S = 60.0

# squeue states of a run that is ending, not of a new run.
_WINDING_DOWN = ("COMPLETING", "STAGE_OUT", "SIGNALING")


class SchedulerError(OrchestratorError):
    """The scheduler refused a job or cannot be reached."""


class SchedulerUnreachable(SchedulerError):
    """The scheduler did not answer: no word about the job either way; ask again later."""


class Refused(SchedulerError):
    """The scheduler answered and said no: no job was made."""

    def __init__(
        self, headline: str, problems: Sequence[str] = (), hints: Sequence[str] = (), stderr: str = "", argv: Sequence[str] = ()
    ) -> None:
        self.stderr = stderr  # the scheduler's own words, for callers that word the error themselves
        self.argv = tuple(argv)  # the command that was refused
        super().__init__(headline, problems, hints)


class SlurmClient:
    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def run(self, argv: Sequence[str], timeout: float = QUERY_TIMEOUT_S) -> Completed:
        """``argv``'s result, whatever its exit status; SchedulerUnreachable when it did not
        answer in ``timeout``, SchedulerError when the command is not installed here."""
        try:
            return self.runner.run(argv, timeout=timeout)
        except FileNotFoundError as exc:
            raise SchedulerError(f"{argv[0]} is not installed here: is this a Slurm login node?") from exc
        except subprocess.TimeoutExpired as exc:
            raise SchedulerUnreachable(f"{argv[0]} did not answer within {timeout:g} s: is the Slurm controller up?") from exc

    def submit(self, script: Path | str, workdir: Path | str, what: str, after: Sequence[str] = (), exclude: Sequence[str] = ()) -> str:
        """Submit ``script`` to run in ``workdir``; the job id. :class:`Refused`, naming ``what``, when sbatch says no."""
        argv = commands.sbatch_argv(str(script), str(workdir), after, exclude)
        done = self.run(argv, timeout=SUBMIT_TIMEOUT_S)
        if done.returncode != 0:
            why = done.stderr.strip() or done.stdout.strip()
            raise Refused(f"sbatch refused {what}: {why}", hints=[f"command: {' '.join(argv)}"], stderr=done.stderr, argv=argv)
        try:
            return commands.parse_sbatch(done.stdout)
        except ValueError as exc:
            raise SchedulerError(str(exc)) from exc

    def query(self, job_ids: Sequence[str]) -> dict[str, JobInfo]:
        """One sacct call for all jobs; squeue fills in jobs sacct does not list yet. A job
        neither lists is left out; SchedulerUnreachable when neither answered."""
        if not job_ids:
            return {}
        found: dict[str, JobInfo] = {}
        sacct = self.run(commands.sacct_argv(job_ids))
        if sacct.returncode == 0:
            found = commands.parse_sacct(sacct.stdout)
        # Ask the controller about jobs the database lacks, and about jobs it says
        # ended: Slurm requeues a --requeue job whose node failed, and the database
        # learns of the new run after a while (seen: NODE_FAIL listed as the last run
        # while the job was pending again). The controller is right about jobs it holds,
        # and only it knows why a pending job waits now (the database's reason lags).
        ask = [j for j in job_ids if j not in found or found[j].state.final or found[j].state == State.PENDING]
        if ask:
            try:
                squeue: Completed | None = self.run(commands.squeue_argv(ask))
            except SchedulerError:
                if sacct.returncode != 0:
                    raise
                squeue = None  # the database answered: its word will do until the next poll
            live = commands.parse_squeue(squeue.stdout) if squeue else {}  # squeue fails on unknown ids but may list the rest
            for job_id, info in live.items():
                found[job_id] = _merged(found.get(job_id), info)
            if squeue is not None and squeue.returncode != 0 and sacct.returncode != 0:
                # Neither the database nor the controller answered: say so, so the
                # caller waits and asks again (never mistaking it for a lost job).
                why = (sacct.stderr or sacct.stdout).strip().splitlines()[-1:] or ["no output"]
                raise SchedulerUnreachable(f"sacct and squeue both failed: {why[0]}")
        return {j: found[j] for j in job_ids if j in found}

    def cancel(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            self.run(commands.scancel_argv(job_ids))


def _merged(ended: JobInfo | None, info: JobInfo) -> JobInfo:
    """squeue's ``info`` over sacct's ``ended`` for the same job."""
    if ended is None:
        return info
    if ended.state == State.PENDING:
        return dataclasses.replace(info, requeues=ended.requeues, node_failures=ended.node_failures)
    if info.state.active and not info.slurm_state.startswith(_WINDING_DOWN):
        # Running again: the run the database saw end was an earlier run.
        failed_on = (ended.nodelist,) if states.node_failed(ended.slurm_state) and ended.nodelist else ()
        return dataclasses.replace(info, requeues=ended.requeues + 1, node_failures=ended.node_failures + failed_on)
    return ended  # the database's answer stands (squeue may still show the run finishing)
