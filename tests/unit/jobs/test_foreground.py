"""`orchestrator run` of one item (orchestrator/jobs/foreground.py) against a fake Slurm
(argv recorded, sacct text canned), and its local form, a child process.

These prove the decisions (attach or submit, when to fail, what to say); the
real-cluster behaviour is proven on the testbed in tests/integration/slurm/test_slurm_testbed.py.
"""

from __future__ import annotations

import pytest
from fakes import PING, FakeClock, FakeRunner, fake_slurm, ok, sacct_sequence
from support import run_fake

from orchestrator.errors import PlanError
from orchestrator.jobs import foreground, ledger
from orchestrator.jobs.backends import SchedulerError
from orchestrator.pipeline.runargs import JobSpec
from orchestrator.slurm.states import State
from orchestrator.util.runner import Completed


def test_submits_waits_and_records(testbed_project):
    runner = fake_slurm()
    outcome, lines = run_fake(testbed_project, runner)
    assert outcome.record.job_id == "101" and outcome.record.state == State.COMPLETED and not outcome.attached
    (sbatch,) = runner.called("sbatch")
    assert sbatch[:3] == ["sbatch", "--parsable", f"--chdir={testbed_project.resolve()}"]
    assert sbatch[3].endswith(".orchestrator/scripts/testbed/bench@x.sbatch")
    assert (testbed_project / ".orchestrator/scripts/testbed/bench@x.sbatch").is_file()
    assert [line.split(": ", 1)[1] for line in lines] == [
        "submitted job 101 on testbed (2x2); log .orchestrator/logs/bench@x-101.log",
        "job 101 pending on node[1-2], 0:00:05 elapsed",
        "job 101 running on node[1-2], 0:00:05 elapsed",
        "job 101 completed on node[1-2], 0:00:05 elapsed",
    ]
    (rec,) = ledger.Ledger(testbed_project).records("bench@x")
    assert rec.state == State.COMPLETED and rec.exit_code == 0 and rec.log == ".orchestrator/logs/bench@x-101.log"
    assert rec.provenance["profile"] == "testbed" and len(rec.provenance["script_sha256"]) == 64


def test_polling_backs_off(testbed_project):
    clock = FakeClock()
    run_fake(testbed_project, fake_slurm(sacct=sacct_sequence(*["PENDING"] * 8, "COMPLETED")), clock)
    assert clock.sleeps == [1, 1.5, 2.25, 3.375, 5.0625, 7.59375, 8, 8, 8]


def test_attaches_to_a_running_job_with_the_same_fingerprint(testbed_project):
    run_fake(testbed_project, fake_slurm())  # job 101, completed
    runner = fake_slurm(sbatch=ok("102\n"))
    outcome, lines = run_fake(testbed_project, runner)
    assert outcome.attached and outcome.record.job_id == "101"
    assert runner.called("sbatch") == []
    assert "attached to job 101 (completed)" in lines[0]


def test_a_changed_script_is_a_new_job(testbed_project):
    run_fake(testbed_project, fake_slurm())
    (testbed_project / "params.yaml").write_text("orchestrator:\n  cluster: testbed\n  account: project_465000858\n  time: '00:20:00'\n")
    runner = fake_slurm(sbatch=ok("102\n"))
    outcome, _ = run_fake(testbed_project, runner)
    assert not outcome.attached and outcome.record.job_id == "102"
    assert [r.job_id for r in ledger.Ledger(testbed_project).records("bench@x")] == ["101", "102"]


def test_failed_or_cancelled_jobs_are_not_attached_to(testbed_project):
    with pytest.raises(foreground.JobFailed):
        run_fake(testbed_project, fake_slurm(sacct=sacct_sequence("FAILED")))
    outcome, _ = run_fake(testbed_project, fake_slurm(sbatch=ok("102\n")))
    assert outcome.record.job_id == "102"


def test_failure_names_job_exit_code_log_and_tail(testbed_project):
    log = testbed_project / ".orchestrator/logs/bench@x-101.log"
    log.parent.mkdir(parents=True)
    log.write_text("".join(f"line {i}\n" for i in range(30)) + "ValueError: boom\n")
    with pytest.raises(foreground.JobFailed) as err:
        run_fake(testbed_project, fake_slurm(sacct=sacct_sequence("RUNNING", "FAILED")))
    text = err.value.render()
    assert "bench@x: job 101 failed (FAILED, exit code 1)" in text
    assert f"log: {log}" in text and "| ValueError: boom" in text and "| line 11\n" in text and "| line 10\n" not in text


def test_query_failures_are_retried_never_resubmitted(testbed_project):
    calls = {"n": 0}

    def flaky(argv):
        calls["n"] += 1
        if calls["n"] <= 3:
            return Completed(tuple(argv), 1, "", "sacct: error: Problem talking to the database")
        return sacct_sequence("COMPLETED")(argv)

    runner = fake_slurm(sacct=flaky, squeue=ok("", rc=1))
    outcome, _ = run_fake(testbed_project, runner)
    assert outcome.record.state == State.COMPLETED
    assert len(runner.called("sbatch")) == 1


def test_preflight_problems_stop_submission(testbed_project):
    lumi = lambda argv: (PING if argv[1] == "ping" else ok("ClusterName = lumi\n"))(argv)  # noqa: E731
    runner = fake_slurm(sacctmgr=ok("project_465000001\n"), scontrol=lumi)
    with pytest.raises(SchedulerError) as err:
        run_fake(testbed_project, runner)
    text = err.value.render()
    assert "ClusterName is 'lumi', but the profile is for 'testbed'" in text
    assert "account 'project_465000858' is not one of" in text and "project_465000001" in text
    assert runner.called("sbatch") == []
    assert ledger.Ledger(testbed_project).records("bench@x") == []


def test_unreachable_controller_stops_submission(testbed_project):
    runner = fake_slurm(scontrol=ok("", "slurm_load_ctl_conf error: Unable to contact slurm controller", rc=1))
    with pytest.raises(SchedulerError, match="not submitted"):
        run_fake(testbed_project, runner)
    assert runner.called("sbatch") == []


def test_sbatch_refusal_is_reported(testbed_project):
    refusal = "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified"
    runner = fake_slurm(sbatch=ok("", refusal, rc=1))
    with pytest.raises(SchedulerError, match="Invalid account"):
        run_fake(testbed_project, runner)
    assert ledger.Ledger(testbed_project).records("bench@x") == []


def test_plan_problems_stop_everything(testbed_project):
    runner = fake_slurm()
    ctx = foreground.Context(testbed_project, "bench@x")
    with pytest.raises(PlanError, match="asks for 8 GPUs per node"):
        foreground.run_item(ctx, JobSpec(command=("python",), gpus_per_node=8), None, None, runner, FakeClock())
    assert runner.calls == []


# --- the local form: a child process, started through the runner -------------------------------


def test_a_local_job_is_a_child_process_started_through_the_runner(testbed_project):
    import socket

    runner = FakeRunner()
    lines = []
    ctx = foreground.Context(testbed_project, "adhoc")
    spec = JobSpec(command=("python", "-c", "pass"))
    outcome = foreground.run_item(ctx, spec, "local", None, runner, FakeClock(), foreground.Polling(first_s=1), lines.append)
    (child,) = runner.spawned
    script = testbed_project / ".orchestrator/scripts/local/adhoc.sh"
    assert child.argv == ("bash", str(script)) and child.cwd == testbed_project and script.is_file()
    assert runner.calls == [["bash", str(script)]]  # nothing else ran: no scheduler to ask
    rec = outcome.record
    assert (rec.job_id, rec.backend, rec.state, rec.exit_code) == (f"local-{child.pid}", "local", State.COMPLETED, 0)
    assert rec.log == ".orchestrator/logs/adhoc-local.log" and rec.nodelist == socket.gethostname()
    assert lines[0].endswith(f"submitted job local-{child.pid} on local (1x1); log .orchestrator/logs/adhoc-local.log")


def test_a_failed_local_child_fails_the_item(testbed_project):
    runner = FakeRunner(exit_codes={"bash": 3})
    with pytest.raises(foreground.JobFailed, match=r"job local-\d+ failed \(process, exit code 3\)"):
        foreground.run_item(foreground.Context(testbed_project, "adhoc"), JobSpec(command=("false",)), "local", None, runner, FakeClock())
    assert len(runner.spawned) == 1
