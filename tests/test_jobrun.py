"""`orchestrator run` logic against a fake Slurm (argv recorded, sacct text canned).

These prove the decisions (attach or submit, when to fail, what to say); the
real-cluster behaviour is proven on the testbed in tests/test_slurm_testbed.py.
"""

from __future__ import annotations

import pytest
from fakes import FakeRunner, ok

from orchestrator.errors import PlanError
from orchestrator.jobs import foreground, ledger
from orchestrator.jobs.backends import SchedulerError
from orchestrator.pipeline.runargs import JobSpec
from orchestrator.slurm.states import State
from orchestrator.util.runner import Completed

SPEC = JobSpec(command=("python", "train.py", "--devices", "2"), nodes=2, gpus_per_node=2)
PING = ok("Slurmctld(primary) at host is UP\n")
CONFIG = ok("ClusterName             = testbed\n")


class FakeClock:
    def __init__(self):
        self.t = 1000.0
        self.sleeps = []

    def now(self):
        return self.t

    def sleep(self, s):
        self.sleeps.append(s)
        self.t += s


@pytest.fixture
def project(tmp_path):
    (tmp_path / "params.yaml").write_text("orchestrator:\n  cluster: testbed\n  account: project_465000858\n")
    return tmp_path


def sacct_sequence(*states):
    """sacct answers: one state per call, the last one repeated."""
    answers = list(states)

    def answer(argv):
        job = argv[argv.index("-j") + 1]
        state = answers.pop(0) if len(answers) > 1 else answers[0]
        code = "1:0" if state == "FAILED" else "0:0"
        return Completed(tuple(argv), 0, f"{job}|{state}|{code}|5|2|node[1-2]|None\n", "")

    return answer


def fake_slurm(**overrides):
    answers = {
        "scontrol": lambda argv: (PING if argv[1] == "ping" else CONFIG)(argv),
        "sacctmgr": ok("project_465000858\n"),
        "sbatch": ok("101\n"),
        "sacct": sacct_sequence("PENDING", "RUNNING", "COMPLETED"),
        "squeue": ok(""),
    }
    answers.update(overrides)
    return FakeRunner(answers)


def run(project, runner, clock=None, item="bench@x"):
    lines = []
    ctx = foreground.Context(project, item)
    polling = foreground.Polling(first_s=1, max_s=8, heartbeat_s=100)
    outcome = foreground.run_item(ctx, SPEC, None, None, runner, clock or FakeClock(), polling, lines.append)
    return outcome, lines


def test_submits_waits_and_records(project):
    runner = fake_slurm()
    outcome, lines = run(project, runner)
    assert outcome.record.job_id == "101" and outcome.record.state == State.COMPLETED and not outcome.attached
    (sbatch,) = runner.called("sbatch")
    assert sbatch[:3] == ["sbatch", "--parsable", f"--chdir={project.resolve()}"]
    assert sbatch[3].endswith(".orchestrator/scripts/testbed/bench@x.sbatch")
    assert (project / ".orchestrator/scripts/testbed/bench@x.sbatch").is_file()
    assert [line.split(": ", 1)[1] for line in lines] == [
        "submitted job 101 on testbed (2x2); log .orchestrator/logs/bench@x-101.log",
        "job 101 pending on node[1-2], 0:00:05 elapsed",
        "job 101 running on node[1-2], 0:00:05 elapsed",
        "job 101 completed on node[1-2], 0:00:05 elapsed",
    ]
    (rec,) = ledger.Ledger(project).records("bench@x")
    assert rec.state == State.COMPLETED and rec.exit_code == 0 and rec.log == ".orchestrator/logs/bench@x-101.log"
    assert rec.provenance["profile"] == "testbed" and len(rec.provenance["script_sha256"]) == 64


def test_polling_backs_off(project):
    clock = FakeClock()
    run(project, fake_slurm(sacct=sacct_sequence(*["PENDING"] * 8, "COMPLETED")), clock)
    assert clock.sleeps == [1, 1.5, 2.25, 3.375, 5.0625, 7.59375, 8, 8, 8]


def test_attaches_to_a_running_job_with_the_same_fingerprint(project):
    run(project, fake_slurm())  # job 101, completed
    runner = fake_slurm(sbatch=ok("102\n"))
    outcome, lines = run(project, runner)
    assert outcome.attached and outcome.record.job_id == "101"
    assert runner.called("sbatch") == []
    assert "attached to job 101 (completed)" in lines[0]


def test_a_changed_script_is_a_new_job(project):
    run(project, fake_slurm())
    (project / "params.yaml").write_text("orchestrator:\n  cluster: testbed\n  account: project_465000858\n  time: '00:20:00'\n")
    runner = fake_slurm(sbatch=ok("102\n"))
    outcome, _ = run(project, runner)
    assert not outcome.attached and outcome.record.job_id == "102"
    assert [r.job_id for r in ledger.Ledger(project).records("bench@x")] == ["101", "102"]


def test_failed_or_cancelled_jobs_are_not_attached_to(project):
    with pytest.raises(foreground.JobFailed):
        run(project, fake_slurm(sacct=sacct_sequence("FAILED")))
    outcome, _ = run(project, fake_slurm(sbatch=ok("102\n")))
    assert outcome.record.job_id == "102"


def test_failure_names_job_exit_code_log_and_tail(project):
    log = project / ".orchestrator/logs/bench@x-101.log"
    log.parent.mkdir(parents=True)
    log.write_text("".join(f"line {i}\n" for i in range(30)) + "ValueError: boom\n")
    with pytest.raises(foreground.JobFailed) as err:
        run(project, fake_slurm(sacct=sacct_sequence("RUNNING", "FAILED")))
    text = err.value.render()
    assert "bench@x: job 101 failed (FAILED, exit code 1)" in text
    assert f"log: {log}" in text and "| ValueError: boom" in text and "| line 11\n" in text and "| line 10\n" not in text


def test_query_failures_are_retried_never_resubmitted(project):
    calls = {"n": 0}

    def flaky(argv):
        calls["n"] += 1
        if calls["n"] <= 3:
            return Completed(tuple(argv), 1, "", "sacct: error: Problem talking to the database")
        return sacct_sequence("COMPLETED")(argv)

    runner = fake_slurm(sacct=flaky, squeue=ok("", rc=1))
    outcome, _ = run(project, runner)
    assert outcome.record.state == State.COMPLETED
    assert len(runner.called("sbatch")) == 1


def test_preflight_problems_stop_submission(project):
    lumi = lambda argv: (PING if argv[1] == "ping" else ok("ClusterName = lumi\n"))(argv)  # noqa: E731
    runner = fake_slurm(sacctmgr=ok("project_465000001\n"), scontrol=lumi)
    with pytest.raises(SchedulerError) as err:
        run(project, runner)
    text = err.value.render()
    assert "ClusterName is 'lumi', but the profile is for 'testbed'" in text
    assert "account 'project_465000858' is not one of" in text and "project_465000001" in text
    assert runner.called("sbatch") == []
    assert ledger.Ledger(project).records("bench@x") == []


def test_unreachable_controller_stops_submission(project):
    runner = fake_slurm(scontrol=ok("", "slurm_load_ctl_conf error: Unable to contact slurm controller", rc=1))
    with pytest.raises(SchedulerError, match="not submitted"):
        run(project, runner)
    assert runner.called("sbatch") == []


def test_sbatch_refusal_is_reported(project):
    refusal = "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified"
    runner = fake_slurm(sbatch=ok("", refusal, rc=1))
    with pytest.raises(SchedulerError, match="Invalid account"):
        run(project, runner)
    assert ledger.Ledger(project).records("bench@x") == []


def test_plan_problems_stop_everything(project):
    runner = fake_slurm()
    ctx = foreground.Context(project, "bench@x")
    with pytest.raises(PlanError, match="asks for 8 GPUs per node"):
        foreground.run_item(ctx, JobSpec(command=("python",), gpus_per_node=8), None, None, runner, FakeClock())
    assert runner.calls == []


def test_cluster_detection(project):
    from orchestrator.config import params, selection

    prm = params.Params(data={}, settings=params.Settings(cluster="auto"))
    assert selection.select_cluster(None, prm, fake_slurm()) == "testbed"
    assert selection.select_cluster("lumi", prm, fake_slurm()) == "lumi"
    assert selection.select_cluster(None, prm, FakeRunner(installed=set())) == "local"
    assert selection.select_cluster(None, prm, fake_slurm(scontrol=ok("ClusterName = elsewhere\n"))) == "local"


# --- the local form: a child process, started through the runner ---------------


def test_a_local_job_is_a_child_process_started_through_the_runner(project):
    import socket

    runner = FakeRunner()
    lines = []
    ctx = foreground.Context(project, "adhoc")
    spec = JobSpec(command=("python", "-c", "pass"))
    outcome = foreground.run_item(ctx, spec, "local", None, runner, FakeClock(), foreground.Polling(first_s=1), lines.append)
    (child,) = runner.spawned
    script = project / ".orchestrator/scripts/local/adhoc.sh"
    assert child.argv == ("bash", str(script)) and child.cwd == project and script.is_file()
    assert runner.calls == [["bash", str(script)]]  # nothing else ran: no scheduler to ask
    rec = outcome.record
    assert (rec.job_id, rec.backend, rec.state, rec.exit_code) == (f"local-{child.pid}", "local", State.COMPLETED, 0)
    assert rec.log == ".orchestrator/logs/adhoc-local.log" and rec.nodelist == socket.gethostname()
    assert lines[0].endswith(f"submitted job local-{child.pid} on local (1x1); log .orchestrator/logs/adhoc-local.log")


def test_a_failed_local_child_fails_the_item(project):
    runner = FakeRunner(exit_codes={"bash": 3})
    with pytest.raises(foreground.JobFailed, match=r"job local-\d+ failed \(process, exit code 3\)"):
        foreground.run_item(foreground.Context(project, "adhoc"), JobSpec(command=("false",)), "local", None, runner, FakeClock())
    assert len(runner.spawned) == 1


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
