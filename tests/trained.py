"""Environments for the tests' real training runs (tests/integration/local/test_*_runs.py)."""

from __future__ import annotations

from support import training_environment


def shared_cores_environment(*also: str) -> dict[str, str]:
    """:func:`support.training_environment` with one OpenMP thread a process, as `orchestrator run` gives tasks
    that share the machine's cores (scripts/job_environment.py).

    The tests start several training processes at once, beside the other tests' workers: left to torch,
    each starts a thread per core, and oversubscribed OpenMP threads spin, which tripled the CPU time of
    a six-step run on a loaded 2-core machine (30 s instead of 11) without changing what it computes."""
    return {**training_environment(*also), "OMP_NUM_THREADS": "1"}
