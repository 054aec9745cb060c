"""Job states: Slurm's many, mapped to our own small set through one table.

Anything not in the table is ``unknown``; the rest of the orchestrator only ever
sees :class:`State`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum


class State(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"

    @property
    def active(self) -> bool:
        return self in (State.PENDING, State.RUNNING)

    @property
    def final(self) -> bool:
        return self in (State.COMPLETED, State.FAILED, State.CANCELLED)


# The one table from Slurm's job states (squeue/sacct, long names) to ours.
SLURM_STATES: Mapping[str, State] = {
    "PENDING": State.PENDING,
    "CONFIGURING": State.PENDING,
    "REQUEUED": State.PENDING,
    "REQUEUE_FED": State.PENDING,
    "REQUEUE_HOLD": State.PENDING,
    "RESV_DEL_HOLD": State.PENDING,
    "SPECIAL_EXIT": State.PENDING,
    "RUNNING": State.RUNNING,
    "COMPLETING": State.RUNNING,
    "STAGE_OUT": State.RUNNING,
    "SIGNALING": State.RUNNING,
    "RESIZING": State.RUNNING,
    "SUSPENDED": State.RUNNING,
    "STOPPED": State.RUNNING,
    "COMPLETED": State.COMPLETED,
    "FAILED": State.FAILED,
    "BOOT_FAIL": State.FAILED,
    "NODE_FAIL": State.FAILED,
    "OUT_OF_MEMORY": State.FAILED,
    "TIMEOUT": State.FAILED,
    "DEADLINE": State.FAILED,
    "PREEMPTED": State.FAILED,
    "REVOKED": State.CANCELLED,
    "CANCELLED": State.CANCELLED,
}


def word(slurm_state: str) -> str:
    """``CANCELLED by 0`` -> ``CANCELLED``, ``RUNNING+`` -> ``RUNNING``."""
    return slurm_state.strip().split(" ", 1)[0].rstrip("+")


def state_of(slurm_state: str) -> State:
    """Our state for Slurm's (``CANCELLED by 0`` -> cancelled, ``FOO`` -> unknown)."""
    return SLURM_STATES.get(word(slurm_state), State.UNKNOWN)


def node_failed(slurm_state: str) -> bool:
    """Whether Slurm ended the run because a node failed, not because of the job."""
    return word(slurm_state) in NODE_FAILURE_STATES


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    state: State
    slurm_state: str
    exit_code: int | None = None  # of the batch script; None while running
    signal: int | None = None
    elapsed_s: int | None = None
    nodes: int | None = None
    nodelist: str | None = None
    reason: str | None = None
    requeues: int = 0  # earlier runs of the same job id (sacct --duplicates lists each)
    node_failures: tuple[str, ...] = ()  # node lists of earlier runs that ended on a node failure (Slurm requeued the job)


# Slurm states that say a node, not the job, failed.
NODE_FAILURE_STATES = ("NODE_FAIL", "BOOT_FAIL")
