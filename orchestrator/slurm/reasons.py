"""Why a job is pending, and whether waiting will ever help.

Most pending reasons clear by themselves (``Priority``, ``Resources``, a
group limit other jobs free up, ``BeginTime``). The ones here do not: a held
job waits for a ``scontrol release``; a job over a per-job limit of its
partition, QOS or association, with constraints no node has, for an account it
may not use, or after a dependency that failed, waits until someone changes it.
Those are reported at once with what to do, so a user does not learn after a day
in the queue that the job was never going to start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.slurm.states import JobInfo, State, word


@dataclass(frozen=True)
class Stuck:
    """A pending job that will not start unless someone acts."""

    reason: str  # as Slurm gives it
    what_to_do: str


# Slurm states of a pending job nobody will start: a held requeue, a special exit.
_HELD_STATES = ("REQUEUE_HOLD", "SPECIAL_EXIT", "RESV_DEL_HOLD")

# (pattern over the reason, what to do); the first match wins. {job} is the job id.
_NEVER_CLEARS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), advice)
    for pattern, advice in (
        (r"held|hold", "the job is held: `scontrol release {job}` lets it start (if a launch failed, check the nodes first: `sinfo -R`)"),
        (
            r"(Partition|QOS|Assoc)\w*(TimeLimit|WallDuration)",
            "the time limit is longer than the partition, QOS or association allows: `scancel {job}`, ask for a shorter --time "
            "(`scontrol show partition`, `sacctmgr show qos`), and run again",
        ),
        (
            r"(Partition|QOS|Assoc)\w*(Node|Cpu|CPU|GRES|Gres|Mem|TRES)\w*PerJob|PartitionNodeLimit|PartitionConfig",
            "the job asks for more nodes, CPUs, GPUs or memory than one job may have there: `scancel {job}`, "
            "ask for less or another partition, and run again",
        ),
        (
            r"Grp\w*(Minutes|RunMins)|Grp\w*MinsLimit",
            "the account's compute budget is used up: ask the project's PI or the site for more, or use another account",
        ),
        (r"BadConstraints", "no node has the features this job asks for (--constraint): `scancel {job}`, fix the constraint, run again"),
        (
            r"InvalidAccount|InvalidQOS|AccountNotAllowed|QOSNotAllowed|PartitionNotAvail|AssociationError|Invalid\w*Assoc",
            "the job's account, QOS or partition is not one this user may use (`sacctmgr show assoc user=$USER`): "
            "`scancel {job}`, fix the profile or params.yaml, run again",
        ),
        (r"PartitionDown|PartitionInactive", "the partition is down and only the site can bring it back: wait, or `scancel {job}`"),
        (
            r"DependencyNeverSatisfied",
            "a job it depends on failed, so this one never starts: `scancel {job}` and run the pipeline again",
        ),
    )
)


def stuck(info: JobInfo) -> Stuck | None:
    """Whether pending ``info`` waits for someone to act; None while waiting helps."""
    if info.state != State.PENDING:
        return None
    reason = (info.reason or "").strip()
    if word(info.slurm_state) in _HELD_STATES:
        reason = f"{word(info.slurm_state)}: {reason or 'held'}"  # the state says held even when the reason does not
    for pattern, advice in _NEVER_CLEARS:
        if pattern.search(reason):
            return Stuck(reason, advice.format(job=info.job_id))
    return None
