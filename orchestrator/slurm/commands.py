"""Slurm's command line: the argv we run and the parsers for what it prints.

Building and parsing are pure and tested on captured text; running goes
through a :class:`~orchestrator.util.runner.Runner`. The states the parsers
return are :mod:`orchestrator.slurm.states`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from orchestrator.slurm.states import JobInfo, node_failed, state_of

# --- argv ----------------------------------------------------------------------

# JobID, not JobIDRaw: an array task is ``<array>_<index>`` (its raw id is another
# number), and the tasks an array has not started yet are one line, ``<array>_[5-99%10]``.
SACCT_FIELDS = ("JobID", "State", "ExitCode", "ElapsedRaw", "NNodes", "NodeList", "Reason")
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


def array_of(job_id: str) -> str:
    """The job a task id belongs to: ``123_4`` -> ``123``; a plain job id is its own."""
    return job_id.split("_", 1)[0]


def asked(job_ids: Iterable[str]) -> list[str]:
    """The ids to give sacct/squeue for ``job_ids``: an array's tasks are asked for by the
    array's id, once (sacct knows nothing of ``123_4`` until that task starts; asked for
    ``123`` it lists every task, the unstarted ones as one range)."""
    return list(dict.fromkeys(array_of(j) for j in job_ids))


def sacct_argv(job_ids: Iterable[str]) -> list[str]:
    # -X: the allocation only, not every step; -P: '|'-separated, no padding;
    # -D: every run of a requeued job, oldest first (so we can count requeues).
    return ["sacct", "-X", "-D", "-n", "-P", "-j", ",".join(asked(job_ids)), f"--format={','.join(SACCT_FIELDS)}"]


def squeue_argv(job_ids: Iterable[str]) -> list[str]:
    # -r: an array's pending tasks one per line (``123_7``), not as one range.
    return ["squeue", "-h", "-r", "-j", ",".join(asked(job_ids)), "-o", SQUEUE_FORMAT]


def squeue_named_argv(user: str, job_name: str) -> list[str]:
    return ["squeue", "-h", "-u", user, "-n", job_name, "-o", "%i|%Z"]


def sacct_named_argv(user: str, job_name: str, since: str) -> list[str]:
    """Jobs of ``user`` called ``job_name`` submitted since ``since`` (sacct's local time)."""
    return ["sacct", "-X", "-n", "-P", "-u", user, f"--name={job_name}", "-S", since, "--format=JobID,WorkDir"]


def parse_named(text: str) -> list[tuple[str, str]]:
    """(job id, working dir) pairs from :func:`squeue_named_argv` or :func:`sacct_named_argv`;
    an array's lines (``123_4``, ``123_[5-9]``) name the array, ``123``."""
    found = []
    for line in text.splitlines():
        job_id, sep, workdir = line.strip().partition("|")
        job_id = array_of(job_id)
        if sep and job_id.isdigit() and (job_id, workdir) not in found:
            found.append((job_id, workdir))
    return found


def expand_tasks(job_id: str) -> list[str]:
    """``123_[1-3,7%2]`` -> ``['123_1', '123_2', '123_3', '123_7']``; any other id as it is."""
    m = re.fullmatch(r"(\d+)_\[([0-9,\-]+)(?:%\d+)?\]", job_id)
    if not m:
        return [job_id]
    ids = []
    for part in m.group(2).split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            ids += [f"{m.group(1)}_{i}" for i in range(int(first), int(last or first) + 1)]
    return ids


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
    unstarted: dict[str, JobInfo] = {}  # an array's tasks listed as one range
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != len(SACCT_FIELDS):
            continue
        job_id, state, exit_code, elapsed, nnodes, nodelist, reason = parts
        if "[" in job_id:
            for task in expand_tasks(job_id):
                unstarted[task] = JobInfo(task, state_of(state), state, reason=None if reason in ("", "None") else reason)
            continue
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
    # A task that started is listed on its own line; the range may still name it a while.
    return {**unstarted, **jobs}


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
