"""Node faults and interrupted submissions, decided against a fake Slurm.

The decisions (what counts as a node fault, which node to leave out, how many
retries with what backoff, which orphaned job to adopt) are proven here; the
real faults (a node set down mid-job, a log with a port error, a killed login
process) are injected on the testbed in tests/integration/slurm/test_faults_testbed.py.
"""

from __future__ import annotations

import json

import pytest
from fakes import FakeClock, fake_slurm, ok
from support import run_fake

from orchestrator.jobs import faults, foreground, ledger
from orchestrator.slurm.states import JobInfo, State
from orchestrator.util.runner import Completed

SEED_002 = "jwb0694:13939:14102 [0] transport/net_ib.cc:94 NCCL WARN NET/IB : Got async event : port error"


def failed(state="FAILED", nodelist="node[1-2]"):
    return JobInfo("7", State.FAILED, state, exit_code=1, nodelist=nodelist)


def test_seed_002_port_error_is_a_fault_of_the_node_it_names():
    fault = faults.classify(failed(nodelist="jwb[0693-0694]"), ["training...", SEED_002, "Traceback (most recent call last):"])
    assert fault is not None and fault.nodes == ("jwb0694",) and "port error" in fault.reason


@pytest.mark.parametrize(
    "line",
    [
        "3: node2:5776:5902 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer 10.2.0.5<33092> with error 12, "
        "opcode 0, len 0, vendor err 129 (Recv)",
        "node2:1:2 [1] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<1> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
        "node2:1:2 [1] NCCL WARN NET/OFI Request 0x1 completed with error. RC: 5. Error: Input/output error",
    ],
)
def test_other_interconnect_errors_and_srun_labels(line):
    assert faults.classify(failed(), [line]).nodes == ("node2",)


def test_a_python_exception_is_not_a_node_fault():
    log = ["Traceback (most recent call last):", '  File "train.py", line 3', "ValueError: NCCL port error in my own message"]
    assert faults.classify(failed(), log) is None


def test_a_host_outside_the_job_is_not_excluded():
    fault = faults.classify(failed(nodelist="node1"), [SEED_002])
    assert fault is not None and fault.nodes == ()


def test_node_fail_names_the_nodes_slurm_calls_unhealthy():
    fault = faults.classify(failed("NODE_FAIL", "node[1-2]"), [], unhealthy=lambda nodes: ["node2", "node9"])
    assert fault == faults.Fault("NODE_FAIL on node2", ("node2",))


def test_node_fail_with_every_node_back_in_service_suspects_them_all():
    assert faults.classify(failed("NODE_FAIL", "node[1-2]"), []).nodes == ("node1", "node2")


def test_the_scheduler_is_asked_about_nodes_only_for_a_node_failure():
    def unhealthy(nodes):
        raise AssertionError("sinfo asked for a job that failed on its own")

    assert faults.classify(failed(), ["ValueError: boom"], unhealthy) is None


@pytest.mark.parametrize("state", [State.COMPLETED, State.CANCELLED, State.RUNNING])
def test_only_failed_jobs_have_faults(state):
    assert faults.classify(JobInfo("7", state, state.value.upper(), nodelist="node1"), [SEED_002]) is None


# --- retries in `orchestrator run` -------------------------------------------------------------


def jobs_that_fail(n_failures, port_error=True):
    """sbatch hands out 101, 102, ...; the first n_failures jobs fail (writing a port
    error on node2 into their log when port_error), the rest complete."""
    state = {"next": 101}

    def sbatch(argv):
        job = state["next"]
        state["next"] += 1
        return Completed(tuple(argv), 0, f"{job}\n", "")

    def sacct(argv):
        job = argv[argv.index("-j") + 1]
        bad = int(job) - 101 < n_failures
        return Completed(tuple(argv), 0, f"{job}|{'FAILED' if bad else 'COMPLETED'}|{'1:0' if bad else '0:0'}|5|2|node[1-2]|None\n", "")

    return sbatch, sacct


def write_logs(testbed_project, jobs, text):
    logs = testbed_project / ".orchestrator/logs"
    logs.mkdir(parents=True, exist_ok=True)
    for job in jobs:
        (logs / f"bench@x-{job}.log").write_text(text)


def test_a_port_error_is_retried_without_that_node_with_backoff(testbed_project):
    sbatch, sacct = jobs_that_fail(2)
    write_logs(testbed_project, (101, 102), "step 1\nnode2:1:1 [0] net_ib.cc:94 NCCL WARN NET/IB : Got async event : port error\n")
    runner = fake_slurm(sbatch=sbatch, sacct=sacct)
    clock = FakeClock()
    outcome, lines = run_fake(testbed_project, runner, clock)
    assert outcome.record.job_id == "103" and outcome.record.state == State.COMPLETED
    argvs = runner.called("sbatch")
    assert [a for a in argvs[0] if a.startswith("--exclude")] == []
    assert "--exclude=node2" in argvs[1] and "--exclude=node2" in argvs[2]
    # testbed profile: retry_backoff_s 2, doubling
    assert 2 in clock.sleeps and 4 in clock.sleeps
    assert any("job 101 failed on a node fault (interconnect error on node2" in line and "retry 1 of 2" in line for line in lines)
    assert any("submitted job 102" in line and "avoiding node2" in line for line in lines)
    recs = ledger.Ledger(testbed_project).records("bench@x")
    assert [(r.job_id, r.state, r.fault_nodes, r.excluded) for r in recs] == [
        ("101", State.FAILED, ("node2",), ()),
        ("102", State.FAILED, ("node2",), ("node2",)),
        ("103", State.COMPLETED, (), ("node2",)),
    ]


def test_retries_are_bounded(testbed_project):
    sbatch, sacct = jobs_that_fail(10)
    write_logs(testbed_project, range(101, 111), SEED_002.replace("jwb0694", "node1") + "\n")
    runner = fake_slurm(sbatch=sbatch, sacct=sacct)
    with pytest.raises(foreground.JobFailed) as err:
        run_fake(testbed_project, runner)
    assert len(runner.called("sbatch")) == 3  # the first try and node_fault_retries: 2
    assert "after 2 retries" in err.value.render() and "port error" in err.value.render()


def test_an_ordinary_exception_is_not_retried(testbed_project):
    sbatch, sacct = jobs_that_fail(1)
    write_logs(testbed_project, (101,), "Traceback (most recent call last):\nRuntimeError: CUDA out of memory\n")
    runner = fake_slurm(sbatch=sbatch, sacct=sacct)
    with pytest.raises(foreground.JobFailed, match="job 101 failed"):
        run_fake(testbed_project, runner)
    assert len(runner.called("sbatch")) == 1
    assert ledger.Ledger(testbed_project).records("bench@x")[0].fault is None


# --- a submission interrupted between sbatch and the ledger ------------------------------------


def leave_intent(testbed_project, known=()):
    """The ledger as a process killed right after sbatch leaves it."""
    run_fake(testbed_project, fake_slurm())  # one finished job (101), so the item has a ledger
    path = testbed_project / ".orchestrator/ledger/bench@x.json"
    data = json.loads(path.read_text())
    fp = data["records"][-1]["fingerprint"]
    data["records"] = []  # a fresh item: the killed process recorded nothing
    data["submitting"] = {
        "fingerprint": fp,
        "job_name": "bench@x",
        "workdir": str(testbed_project.resolve()),
        "written_at": 1000.0,
        "known": list(known),
    }
    path.write_text(json.dumps(data))


def test_an_orphaned_job_is_adopted_not_submitted_again(testbed_project):
    leave_intent(testbed_project)
    runner = fake_slurm(
        squeue=ok(f"205|{testbed_project.resolve()}\n206|/elsewhere\n"),
        sacct=lambda argv: (ok("") if "--name=bench@x" in argv else jobrun_sacct("205", "COMPLETED"))(argv),
    )
    outcome, lines = run_fake(testbed_project, runner)
    assert runner.called("sbatch") == []
    assert outcome.record.job_id == "205" and outcome.record.adopted and outcome.record.state == State.COMPLETED
    assert any("found job 205" in line and "interrupted earlier run" in line for line in lines)
    assert "submitting" not in json.loads((testbed_project / ".orchestrator/ledger/bench@x.json").read_text())


def test_no_orphan_found_means_submit(testbed_project):
    leave_intent(testbed_project)
    runner = fake_slurm(
        squeue=ok(""),
        sbatch=ok("301\n"),
        sacct=lambda argv: (ok("") if "--name=bench@x" in argv else jobrun_sacct("301", "COMPLETED"))(argv),
    )
    outcome, _ = run_fake(testbed_project, runner)
    assert len(runner.called("sbatch")) == 1 and outcome.record.job_id == "301" and not outcome.record.adopted


def test_known_jobs_are_not_adopted(testbed_project):
    leave_intent(testbed_project, known=("205",))
    runner = fake_slurm(
        squeue=ok(f"205|{testbed_project.resolve()}\n"),
        sbatch=ok("301\n"),
        sacct=lambda argv: (ok("") if "--name=bench@x" in argv else jobrun_sacct("301", "COMPLETED"))(argv),
    )
    outcome, _ = run_fake(testbed_project, runner)
    assert outcome.record.job_id == "301"


def test_an_unanswerable_orphan_question_submits_nothing(testbed_project):
    leave_intent(testbed_project)
    down = ok("", "slurm_load_jobs error: Unable to contact slurm controller", rc=1)
    runner = fake_slurm(squeue=down, sacct=down)
    with pytest.raises(foreground.backends.SchedulerError, match="interrupted submission"):
        run_fake(testbed_project, runner)
    assert runner.called("sbatch") == []


def jobrun_sacct(job, state):
    return ok(f"{job}|{state}|0:0|5|2|node[1-2]|None\n")


def test_a_job_slurm_requeued_after_a_node_failure_is_kept_off_that_node(testbed_project):
    """With --requeue, Slurm itself requeues a job whose node failed: `run` sees the
    NODE_FAIL run in sacct's history, keeps the pending job off the node
    (scontrol update ExcNodeList) and records the fault; no second job."""
    answers = iter(
        [
            "101|RUNNING|0:0|5|1|node2|None\n",
            "101|NODE_FAIL|0:0|9|1|node2|None\n101|PENDING|0:0|0|1|None assigned|BeginTime\n",
            "101|NODE_FAIL|0:0|9|1|node2|None\n101|RUNNING|0:0|3|1|node1|None\n",
        ]
    )
    last = "101|NODE_FAIL|0:0|9|1|node2|None\n101|COMPLETED|0:0|30|1|node1|None\n"
    runner = fake_slurm(sacct=lambda argv: Completed(tuple(argv), 0, next(answers, last), ""), sinfo=ok("node2|down*\n"))
    runner.installed.add("sinfo")
    outcome, lines = run_fake(testbed_project, runner)
    assert len(runner.called("sbatch")) == 1
    assert ["scontrol", "update", "JobId=101", "ExcNodeList=node2"] in runner.calls
    rec = outcome.record
    assert rec.state == State.COMPLETED and rec.requeues == 1 and rec.fault_nodes == ("node2",) and rec.excluded == ("node2",)
    assert any("lost a node (node2); Slurm requeued it, kept off node2" in line for line in lines)


def test_a_requeue_the_database_has_not_seen_yet_is_not_resubmitted(testbed_project):
    """Seen on the testbed: right after the node failed, sacct's last run of the job is
    NODE_FAIL while slurmctld already holds it pending again. The controller's word
    wins: no second job (it would have run alongside the requeued one)."""
    sacct = iter(["101|RUNNING|0:0|5|1|node2|None\n", "101|NODE_FAIL|0:0|9|1|node2|None\n", "101|NODE_FAIL|0:0|9|1|node2|None\n"])
    squeue = iter(["101|PENDING|0:00|1||BeginTime\n", "101|RUNNING|0:02|1|node1|None\n"])
    last = "101|NODE_FAIL|0:0|9|1|node2|None\n101|COMPLETED|0:0|30|1|node1|None\n"
    runner = fake_slurm(
        sacct=lambda argv: Completed(tuple(argv), 0, next(sacct, last), ""),
        squeue=lambda argv: Completed(tuple(argv), 0, next(squeue, ""), ""),
    )
    outcome, lines = run_fake(testbed_project, runner)
    assert len(runner.called("sbatch")) == 1 and outcome.record.job_id == "101"
    assert ["scontrol", "update", "JobId=101", "ExcNodeList=node2"] in runner.calls
    assert outcome.record.state == State.COMPLETED and outcome.record.fault_nodes == ("node2",)
    assert not any("submitting again" in line for line in lines)
