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


def test_a_wait_on_the_process_backend_ends_with_its_child(tmp_path):
    """Between looks at a child of its own, the backend waits for the child, not out the whole wait: a
    quick local job is noticed as it ends. Another process's job, and Slurm's, wait the given time."""
    import time
    from types import SimpleNamespace

    from orchestrator.jobs.backends import ProcessBackend, SbatchBackend
    from orchestrator.util.runner import SubprocessRunner

    backend = ProcessBackend(tmp_path, SubprocessRunner())
    (tmp_path / "x.sh").write_text("sleep 0.3\n")
    job = backend.submit(SimpleNamespace(log="x.log"), tmp_path / "x.sh").job_id
    slept = []
    started = time.monotonic()
    backend.pause(job, 60, slept.append)
    assert time.monotonic() - started < 30 and slept == []
    assert backend.query([job])[job].state == State.COMPLETED
    backend.pause("local-1", 5, slept.append)
    SbatchBackend(tmp_path, FakeRunner(), None).pause("42", 7, slept.append)
    assert slept == [5, 7]
