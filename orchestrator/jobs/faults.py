"""Faults: telling a job the hardware failed from a job that failed on its own.

A job that ended because a node died (Slurm's ``NODE_FAIL``/``BOOT_FAIL``) or whose
log shows a known interconnect error is worth running again elsewhere; a Python
exception is not (it fails the same way again, on any node). Classification is
pure: the caller brings the job's state, the tail of its log and a way to ask
which nodes Slurm now calls unhealthy.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import hostlist

from orchestrator.slurm.states import JobInfo, State, node_failed

# Interconnect errors after which the job cannot go on, as NCCL/RCCL print them:
# "<host>:<pid>:<tid> [<dev>] <file>:<line> NCCL WARN <message>", perhaps behind
# srun's "<task>: " label. The first is what a flaky JUWELS Booster link prints.
INTERCONNECT = (
    re.compile(r"NET/IB\s*:\s*Got async event\s*:\s*port error"),
    re.compile(r"NET/IB\s*:\s*Got completion from peer .* with (error|status)[ =]\d+"),
    re.compile(r"NET/OFI\s.*completed with error"),  # aws-ofi-nccl/-rccl (Slingshot, EFA)
)
_HOST = re.compile(r"^(?:\d+:\s*)?(?P<host>[A-Za-z0-9][A-Za-z0-9._-]*):\d+:\d+\s+\[\d+\]")

# How much of a log's end is read: errors are near the end, logs can be gigabytes.
LOG_TAIL_BYTES = 1 << 20


@dataclass(frozen=True)
class Fault:
    reason: str  # one line, for messages, status and the ledger
    nodes: tuple[str, ...]  # to leave out of the next try (may be empty: Slurm avoids down nodes itself)


def nodes_of(nodelist: str | None) -> list[str]:
    """``node[1-2]`` -> ``['node1', 'node2']`` (empty for none or a malformed list)."""
    if not nodelist:
        return []
    try:
        return hostlist.expand_hostlist(nodelist)
    except hostlist.BadHostlist:
        return []


def suspects(nodes: Sequence[str], unhealthy: Callable[[Sequence[str]], Sequence[str]]) -> list[str]:
    """Which of a failed run's ``nodes`` to leave out: those Slurm still calls unhealthy;
    if none (a node that failed may be back in service already: the flaky kind), all."""
    bad = set(unhealthy(nodes)) if nodes else set()
    return [n for n in nodes if n in bad] or list(nodes)


def classify(
    info: JobInfo, log_lines: Iterable[str], unhealthy: Callable[[Sequence[str]], Sequence[str]] = lambda nodes: ()
) -> Fault | None:
    """The node fault that ended the job, or None when the job failed on its own.
    ``unhealthy`` asks the scheduler which nodes are down (only for a node failure)."""
    if info.state != State.FAILED:
        return None  # completed, cancelled by someone, or still going
    ran_on = nodes_of(info.nodelist)
    if node_failed(info.slurm_state):
        bad = suspects(ran_on, unhealthy)
        return Fault(f"{info.slurm_state.split(' ', 1)[0]} on {', '.join(bad) or 'its nodes'}", tuple(bad))
    for line in log_lines:
        if any(p.search(line) for p in INTERCONNECT):
            m = _HOST.match(line)
            host = m.group("host") if m else None
            # The host NCCL names is the node if it is one of the job's (hostnames and
            # Slurm node names agree on the clusters we know); else leave none out.
            named = (host,) if host is not None and host in ran_on else ()
            return Fault(f"interconnect error on {host or 'an unnamed node'}: {line.strip()[-160:]}", named)
    return None


def read_tail(path: Path | None, limit: int = LOG_TAIL_BYTES) -> list[str]:
    """The last ``limit`` bytes of a log as lines (none if there is none)."""
    if path is None:
        return []
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode(errors="replace").splitlines()
    except (FileNotFoundError, IsADirectoryError):
        return []
