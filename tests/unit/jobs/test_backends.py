"""Job backends (orchestrator/jobs/backends.py): the process backend's children and other processes' pids."""

from __future__ import annotations

from fakes import FakeRunner

from orchestrator.slurm.states import State


def test_the_process_backend_follows_its_children_and_checks_other_pids(tmp_path):
    import os
    import subprocess
    from types import SimpleNamespace

    from orchestrator.jobs.backends import ProcessBackend

    runner = FakeRunner(exit_codes={"bash": None})  # still running
    backend = ProcessBackend(tmp_path, runner)
    plan = SimpleNamespace(log=".orchestrator/logs/x-local.log")  # submit reads only the plan's log
    accepted = backend.submit(plan, tmp_path / "x.sh")
    (child,) = runner.spawned
    assert accepted.job_id == f"local-{child.pid}" and accepted.log == ".orchestrator/logs/x-local.log"
    assert backend.query([accepted.job_id])[accepted.job_id].state == State.RUNNING
    backend.cancel([accepted.job_id])
    assert child.terminated and backend.query([accepted.job_id])[accepted.job_id].state == State.FAILED
    # A job of an earlier orchestrator process: running while its pid is alive.
    mine, ended = f"local-{os.getpid()}", subprocess.Popen(["true"])
    ended.wait()
    found = backend.query([mine, f"local-{ended.pid}"])
    assert (found[mine].state, found[f"local-{ended.pid}"].state) == (State.RUNNING, State.UNKNOWN)
