"""`orchestrator run` of one item (orchestrator/jobs/foreground.py) against a fake Slurm
(argv recorded, sacct text canned), and its local form, a child process.

These prove the decisions (attach or submit, when to fail, what to say); the
real-cluster behaviour is proven on the testbed in tests/integration/slurm/test_slurm_testbed.py.
"""

from __future__ import annotations

import pytest
from fakes import PING, FakeClock, FakeRunner, fake_slurm, ok, sacct_sequence
from support import run_fake

from orchestrator.errors import ConfigError, JobFailed, PlanError
from orchestrator.jobs import foreground, ledger
from orchestrator.jobs.backends import SchedulerError
from orchestrator.jobs.submission import NotRecorded
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
        "job 101 pending on node[1-2]",
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
    runner = fake_slurm(sbatch=ok("102\n"), sacct=sacct_sequence("COMPLETED"))
    outcome, lines = run_fake(testbed_project, runner)
    assert outcome.attached and outcome.record.job_id == "101"
    assert runner.called("sbatch") == []
    assert "attached to job 101 (completed)" in lines[0]


def test_a_running_job_slurm_lists_a_moment_later_is_followed_not_submitted_again(testbed_project, monkeypatch):
    """An ended job may be in neither squeue (it ended) nor sacct (the database lags): asked
    again after a pause, it is found and followed, instead of taken for gone."""
    from orchestrator.jobs import submission

    class Killed(Exception):
        pass

    class KilledWhileWaiting(FakeClock):
        def sleep(self, s):
            super().sleep(s)
            raise Killed  # the first run dies while its job is queued: active in the ledger

    with pytest.raises(Killed):
        run_fake(testbed_project, fake_slurm(sacct=sacct_sequence("PENDING")), KilledWhileWaiting())
    assert ledger.Ledger(testbed_project).records("bench@x")[0].state.active
    answers = iter(["", "", "101|COMPLETED|0:0|5|2|node[1-2]|None\n"])  # unlisted twice, then there
    runner = fake_slurm(sbatch=ok("102\n"))
    runner.answers["sacct"] = lambda argv: Completed(tuple(argv), 0, next(answers) if "-j" in argv else "", "")
    pauses = []
    monkeypatch.setattr(submission, "pause", pauses.append)
    outcome, lines = run_fake(testbed_project, runner)
    assert outcome.attached and outcome.record.job_id == "101" and runner.called("sbatch") == []
    assert pauses == list(submission.LOOKUP_RETRY_S[:2])


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


def _pending(reason: str, then: str = "COMPLETED", times: int = 1):
    """sacct: pending with ``reason`` ``times`` times, then ``then``."""
    answers = [f"PENDING|0:0|0|2||{reason}"] * times + [f"{then}|0:0|5|2|node[1-2]|None"]

    def answer(argv):
        job = argv[argv.index("-j") + 1]
        line = answers.pop(0) if len(answers) > 1 else answers[0]
        return Completed(tuple(argv), 0, f"{job}|{line}\n", "")

    return answer


def test_the_pending_reason_is_shown(testbed_project):
    _, lines = run_fake(testbed_project, fake_slurm(sacct=_pending("Priority", times=2)))
    assert "job 101 pending (Priority)" in lines[1]
    assert not any("will not start" in line for line in lines)


def test_a_held_job_is_reported_at_once_and_run_gives_up_after_the_profiles_time(testbed_project):
    # squeue, which knows a pending job's reason now, says held (slurmctld died while the job started)
    squeue = ok("101|PENDING|0:00|2||launch failed requeued held\n")
    clock = FakeClock()
    with pytest.raises(JobFailed) as failed:
        run_fake(testbed_project, fake_slurm(sacct=_pending("None", times=1000), squeue=squeue), clock)
    message = str(failed.value)
    assert "job 101 has been pending for launch failed requeued held" in message and "scheduler.stuck_timeout_s" in message
    assert "scontrol release 101" in message and "scancel 101" in message
    assert 600 <= clock.t - 1000 <= 600 + 2 * 8  # the testbed profile's stuck_timeout_s, give or take a poll


def test_a_held_job_line_comes_once_with_what_to_do(testbed_project):
    # held three polls (then someone released it), then gone from the controller's queue
    squeue_answers = ["101|PENDING|0:00|2||JobHeldUser\n"] * 3 + [""]

    def squeue(argv):
        return Completed(tuple(argv), 0, squeue_answers.pop(0) if len(squeue_answers) > 1 else squeue_answers[0], "")

    runner = fake_slurm(sacct=_pending("None", times=4), squeue=squeue)
    outcome, lines = run_fake(testbed_project, runner)
    held = [line for line in lines if "will not start by itself" in line]
    assert len(held) == 1 and "(JobHeldUser)" in held[0] and "`scontrol release 101`" in held[0]
    assert outcome.record.state == State.COMPLETED


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "soon", "1e9"])
def test_bad_polling_variables_are_refused_before_anything_is_submitted(testbed_project, monkeypatch, value):
    monkeypatch.setenv("ORCH_POLL_MAX_S", value)
    runner = fake_slurm()
    with pytest.raises(ConfigError, match="ORCH_POLL_MAX_S"):
        foreground.run_item(foreground.Context(testbed_project, "bench@x"), JobSpec(command=("true",)), None, None, runner, FakeClock())
    assert runner.called("sbatch") == [] and not (testbed_project / ".orchestrator").exists()


def _named(job: str, workdir):
    """squeue/sacct answers for the search by job name: ``job`` in ``workdir``; the job
    then runs and completes."""
    states = sacct_sequence("RUNNING", "COMPLETED")

    def answer(argv):
        if any(a.startswith("--name=") for a in argv) or (argv[0] == "squeue" and "-n" in argv):
            return Completed(tuple(argv), 0, f"{job}|{workdir}\n", "")
        if argv[0] == "squeue":
            return Completed(tuple(argv), 0, "", "")
        return states(argv)

    return answer


def test_a_damaged_ledger_of_a_running_item_is_recovered_without_a_second_job(testbed_project):
    (testbed_project / ".orchestrator/ledger").mkdir(parents=True)
    (testbed_project / ".orchestrator/ledger/bench@x.json").write_bytes(b'{"records": [{"item": "bench@x", "job_')
    find = _named("77", testbed_project.resolve())
    runner = fake_slurm(sacct=find, squeue=find)
    outcome, lines = run_fake(testbed_project, runner)
    assert runner.called("sbatch") == []
    assert outcome.attached and outcome.record.job_id == "77" and outcome.record.adopted
    assert "found job 77" in lines[0]
    history = ledger.Ledger(testbed_project).history("bench@x")
    assert history.recovery.checked and history.recovery.found == "77"
    assert list((testbed_project / ".orchestrator/ledger").glob("bench@x.json.damaged-*"))


def test_a_damaged_ledger_with_no_job_on_the_scheduler_submits_once(testbed_project):
    (testbed_project / ".orchestrator/ledger").mkdir(parents=True)
    (testbed_project / ".orchestrator/ledger/bench@x.json").mkdir()
    runner = fake_slurm()
    outcome, _ = run_fake(testbed_project, runner)
    assert len(runner.called("sbatch")) == 1 and outcome.record.job_id == "101"
    named = [argv for argv in runner.called("squeue") + runner.called("sacct") if "-u" in argv]
    assert len(named) == 2  # the scheduler was asked (squeue and sacct) before submitting


def test_a_full_disk_after_sbatch_names_the_job_and_the_next_run_follows_it(testbed_project, monkeypatch):
    import errno

    from orchestrator.util import files

    submitted = []
    real_write = files.atomic_write

    def write(path, data, **kw):
        if submitted and path.suffix == ".json":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real_write(path, data, **kw)

    def sbatch(argv):
        submitted.append(argv)
        return Completed(tuple(argv), 0, "101\n", "")

    monkeypatch.setattr(files, "atomic_write", write)
    with pytest.raises(NotRecorded) as failed:
        run_fake(testbed_project, fake_slurm(sbatch=sbatch))
    assert "job 101" in str(failed.value) and "No space left" in str(failed.value)
    monkeypatch.setattr(files, "atomic_write", real_write)  # space freed
    find = _named("101", testbed_project.resolve())
    runner = fake_slurm(sacct=find, squeue=find)
    outcome, lines = run_fake(testbed_project, runner)
    assert runner.called("sbatch") == [] and outcome.record.job_id == "101" and outcome.attached
    assert "submitted by an interrupted earlier run" in lines[0]
