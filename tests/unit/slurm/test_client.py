"""The one Slurm client (orchestrator/slurm/client.py) against a fake runner with Slurm's captured
text: what sbatch, sacct and squeue print, and how each failure is classified (no answer vs. no)."""

from __future__ import annotations

import subprocess

import pytest
from fakes import FakeRunner, ok

from orchestrator.slurm.client import Refused, SchedulerError, SchedulerUnreachable, SlurmClient
from orchestrator.slurm.states import State

SQUEUE_DOWN = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"
SACCT_DOWN = "sacct: error: Problem talking to the database: Connection refused\n"


def timed_out(argv):
    raise subprocess.TimeoutExpired(argv, 60)


def test_submit_is_sbatch_parsable_and_gives_the_job_id(tmp_path):
    runner = FakeRunner({"sbatch": ok("4242;testbed\n")})
    assert SlurmClient(runner).submit(tmp_path / "x.sbatch", tmp_path, "x", after=["7"], exclude=["node2"]) == "4242"
    (argv,) = runner.called("sbatch")
    assert argv[:3] == ["sbatch", "--parsable", f"--chdir={tmp_path}"] and argv[-1] == str(tmp_path / "x.sbatch")
    assert "--dependency=afterok:7" in argv and "--exclude=node2" in argv


def test_a_refusal_keeps_slurms_words_and_the_command(tmp_path):
    said = "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified\n"
    runner = FakeRunner({"sbatch": ok("", said, rc=1)})
    with pytest.raises(Refused) as err:
        SlurmClient(runner).submit("x.sbatch", tmp_path, "item a")
    assert err.value.headline == f"sbatch refused item a: {said.strip()}"
    assert err.value.stderr == said and err.value.argv[:2] == ("sbatch", "--parsable")


def test_no_answer_is_unreachable_not_a_refusal_and_no_command_is_no_login_node(tmp_path):
    with pytest.raises(SchedulerUnreachable, match="sbatch did not answer within 120 s"):
        SlurmClient(FakeRunner({"sbatch": timed_out})).submit("x.sbatch", tmp_path, "x")
    with pytest.raises(SchedulerError, match="sbatch is not installed here") as err:
        SlurmClient(FakeRunner({})).submit("x.sbatch", tmp_path, "x")
    assert not isinstance(err.value, (SchedulerUnreachable, Refused))
    with pytest.raises(SchedulerError, match="printed no job id"):
        SlurmClient(FakeRunner({"sbatch": ok("Submitted batch job\n")})).submit("x.sbatch", tmp_path, "x")


def test_query_asks_sacct_first_and_squeue_for_what_it_lacks():
    runner = FakeRunner(
        {
            "sacct": ok("10|COMPLETED|0:0|30|1|node1|None\n"),
            "squeue": ok("11|RUNNING|1:05|2|node[1-2]|None\n"),
        }
    )
    found = SlurmClient(runner).query(["10", "11", "12"])
    assert (found["10"].state, found["11"].state, found["11"].elapsed_s) == (State.COMPLETED, State.RUNNING, 65)
    assert "12" not in found  # neither knows it: left out, not an error
    assert [c[0] for c in runner.calls] == ["sacct", "squeue"]
    assert runner.called("squeue")[0][runner.called("squeue")[0].index("-j") + 1] == "10,11,12"  # ended ones too (requeues)


def test_a_run_again_after_the_one_the_database_saw_end_is_a_requeue():
    runner = FakeRunner({"sacct": ok("10|NODE_FAIL|0:0|9|1|node2|None\n"), "squeue": ok("10|RUNNING|0:02|1|node1|None\n")})
    info = SlurmClient(runner).query(["10"])["10"]
    assert info.state == State.RUNNING and info.requeues == 1 and info.node_failures == ("node2",)


def test_query_with_neither_answering_is_unreachable():
    runner = FakeRunner({"sacct": ok("", SACCT_DOWN, rc=1), "squeue": ok("", SQUEUE_DOWN, rc=1)})
    with pytest.raises(SchedulerUnreachable, match="sacct and squeue both failed: sacct: error: Problem talking to the database"):
        SlurmClient(runner).query(["10"])
    runner = FakeRunner({"sacct": ok("", SACCT_DOWN, rc=1), "squeue": timed_out})
    with pytest.raises(SchedulerUnreachable, match="squeue did not answer within 60 s"):
        SlurmClient(runner).query(["10"])


def test_a_squeue_timeout_leaves_the_databases_word():
    runner = FakeRunner({"sacct": ok("10|RUNNING|0:0|30|1|node1|None\n"), "squeue": timed_out})
    assert SlurmClient(runner).query(["10"])["10"].state == State.RUNNING
    runner = FakeRunner({"sacct": ok("10|PENDING|0:0|0|1|None assigned|Priority\n"), "squeue": ok("", SQUEUE_DOWN, rc=1)})
    assert SlurmClient(runner).query(["10"])["10"].reason == "Priority"


def test_cancel_is_one_scancel_and_nothing_for_no_jobs():
    runner = FakeRunner({"scancel": ok("")})
    SlurmClient(runner).cancel([])
    SlurmClient(runner).cancel(["10", "11_2"])
    assert runner.calls == [["scancel", "10", "11_2"]]
