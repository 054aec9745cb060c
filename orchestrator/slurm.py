"""Slurm's command line: the argv we run and the parsers for what it prints.

Building and parsing are pure and tested on captured text; running goes
through a :class:`~orchestrator.runner.Runner`. Slurm's many job states map to
our own small set through one table; anything not in it is ``unknown``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
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


def _word(slurm_state: str) -> str:
    """``CANCELLED by 0`` -> ``CANCELLED``, ``RUNNING+`` -> ``RUNNING``."""
    return slurm_state.strip().split(" ", 1)[0].rstrip("+")


def state_of(slurm_state: str) -> State:
    """Our state for Slurm's (``CANCELLED by 0`` -> cancelled, ``FOO`` -> unknown)."""
    return SLURM_STATES.get(_word(slurm_state), State.UNKNOWN)


def node_failed(slurm_state: str) -> bool:
    """Whether Slurm ended the run because a node failed, not because of the job."""
    return _word(slurm_state) in NODE_FAILURE_STATES


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


# --- argv ----------------------------------------------------------------------

SACCT_FIELDS = ("JobIDRaw", "State", "ExitCode", "ElapsedRaw", "NNodes", "NodeList", "Reason")
SQUEUE_FORMAT = "%i|%T|%M|%D|%N|%r"


def sbatch_argv(script: str, workdir: str, after: Iterable[str] = (), exclude: Iterable[str] = ()) -> list[str]:
    """Submit ``script`` to run in ``workdir`` (its relative log path is resolved
    there, wherever we are); with ``after``, once those jobs succeed (never if one fails);
    never on the nodes in ``exclude`` (a command-line option wins over the script's directives)."""
    argv = ["sbatch", "--parsable", f"--chdir={workdir}"]
    after = list(after)
    if after:
        argv += [f"--dependency=afterok:{':'.join(after)}", "--kill-on-invalid-dep=yes"]
    exclude = sorted(set(exclude))
    if exclude:
        argv.append(f"--exclude={','.join(exclude)}")
    return [*argv, script]


def sacct_argv(job_ids: Iterable[str]) -> list[str]:
    # -X: the allocation only, not every step; -P: '|'-separated, no padding;
    # -D: every run of a requeued job, oldest first (so we can count requeues).
    return ["sacct", "-X", "-D", "-n", "-P", "-j", ",".join(job_ids), f"--format={','.join(SACCT_FIELDS)}"]


def squeue_argv(job_ids: Iterable[str]) -> list[str]:
    return ["squeue", "-h", "-j", ",".join(job_ids), "-o", SQUEUE_FORMAT]


def squeue_named_argv(user: str, job_name: str) -> list[str]:
    return ["squeue", "-h", "-u", user, "-n", job_name, "-o", "%i|%Z"]


def sacct_named_argv(user: str, job_name: str, since: str) -> list[str]:
    """Jobs of ``user`` called ``job_name`` submitted since ``since`` (sacct's local time)."""
    return ["sacct", "-X", "-n", "-P", "-u", user, f"--name={job_name}", "-S", since, "--format=JobIDRaw,WorkDir"]


def parse_named(text: str) -> list[tuple[str, str]]:
    """(job id, working dir) pairs from :func:`squeue_named_argv` or :func:`sacct_named_argv`."""
    found = []
    for line in text.splitlines():
        job_id, sep, workdir = line.strip().partition("|")
        if sep and job_id.isdigit():
            found.append((job_id, workdir))
    return found


def exclude_argv(job_id: str, nodes: Iterable[str]) -> list[str]:
    """Keep a pending job off ``nodes`` (it may have been requeued after one failed)."""
    return ["scontrol", "update", f"JobId={job_id}", f"ExcNodeList={','.join(sorted(set(nodes)))}"]


def sinfo_nodes_argv(nodes: Iterable[str]) -> list[str]:
    return ["sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%N|%T"]


# sinfo's long node states for a node that should not get work (a trailing * means
# not responding, whatever the state).
_UNHEALTHY = ("down", "drain", "fail", "no_respond", "not_responding", "unknown")


def parse_unhealthy(text: str) -> list[str]:
    """Nodes from :func:`sinfo_nodes_argv` output that are down, drained or failing."""
    bad = []
    for line in text.splitlines():
        node, sep, state = line.strip().partition("|")
        state = state.lower()
        if sep and (state.endswith("*") or state.startswith(_UNHEALTHY)) and node not in bad:
            bad.append(node)
    return bad


def scancel_argv(job_ids: Iterable[str]) -> list[str]:
    return ["scancel", *job_ids]


# --- parsers -------------------------------------------------------------------


def parse_sbatch(stdout: str) -> str:
    """The job id from ``sbatch --parsable`` (``123`` or ``123;cluster``)."""
    first = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    job_id = first.split(";", 1)[0]
    if not job_id.isdigit():
        raise ValueError(f"sbatch printed no job id: {stdout.strip()!r}")
    return job_id


def parse_sacct(text: str) -> dict[str, JobInfo]:
    """Jobs from ``sacct -X -n -P --format=<SACCT_FIELDS>`` (the last line per job wins:
    a requeued job is listed once per run, newest last)."""
    jobs: dict[str, JobInfo] = {}
    runs: dict[str, int] = {}
    failed_on: dict[str, tuple[str, ...]] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != len(SACCT_FIELDS):
            continue
        job_id, state, exit_code, elapsed, nnodes, nodelist, reason = parts
        earlier = jobs.get(job_id)
        if earlier is not None and node_failed(earlier.slurm_state) and earlier.nodelist:
            failed_on[job_id] = (*failed_on.get(job_id, ()), earlier.nodelist)
        runs[job_id] = runs.get(job_id, 0) + 1
        code, sig = _exit_code(exit_code)
        st = state_of(state)
        jobs[job_id] = JobInfo(
            job_id=job_id,
            state=st,
            slurm_state=state,
            exit_code=code if st.final else None,
            signal=sig if st.final else None,
            elapsed_s=int(elapsed) if elapsed.isdigit() else None,
            nodes=int(nnodes) if nnodes.isdigit() else None,
            nodelist=None if nodelist in ("", "None assigned") else nodelist,
            reason=None if reason in ("", "None") else reason,
            requeues=runs[job_id] - 1,
            node_failures=failed_on.get(job_id, ()),
        )
    return jobs


def parse_squeue(text: str) -> dict[str, JobInfo]:
    """Jobs from ``squeue -h -o <SQUEUE_FORMAT>`` (only jobs Slurm still holds)."""
    jobs: dict[str, JobInfo] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != 6:
            continue
        job_id, state, elapsed, nnodes, nodelist, reason = parts
        jobs[job_id] = JobInfo(
            job_id=job_id,
            state=state_of(state),
            slurm_state=state,
            elapsed_s=_duration(elapsed),
            nodes=int(nnodes) if nnodes.isdigit() else None,
            nodelist=nodelist or None,
            reason=None if reason in ("", "None") else reason,
        )
    return jobs


def parse_config_value(text: str, key: str) -> str | None:
    """A value from ``scontrol show config`` (``ClusterName = lumi``)."""
    m = re.search(rf"^{re.escape(key)}\s*=\s*(\S+)", text, re.M)
    return m.group(1) if m else None


def _exit_code(text: str) -> tuple[int | None, int | None]:
    code, _, sig = text.partition(":")
    return (int(code) if code.isdigit() else None, int(sig) if sig.isdigit() else None)


def _duration(text: str) -> int | None:
    """Seconds in squeue's ``[D-]HH:MM:SS`` / ``MM:SS``."""
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text.strip())
    if not m:
        return None
    d, h, mi, s = (int(x) if x else 0 for x in m.groups())
    return ((d * 24 + h) * 60 + mi) * 60 + s
