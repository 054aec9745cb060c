"""Slurm output parsers, on text captured from a real Slurm 22.05 (the testbed)."""

import pytest

from orchestrator.slurm import commands, config, states
from orchestrator.slurm.states import State

SACCT = """\
41|COMPLETED|0:0|12|2|node[1-2]|None
42|FAILED|1:0|3|1|node1|NonZeroExitCode
43|CANCELLED by 0|0:15|0|1|None assigned|None
44|RUNNING|0:0|7|2|node[1-2]|None
45|REQUEUED|0:0|30|1|node2|None
45|PENDING|0:0|0|1|None assigned|BeginTime
46|OUT_OF_MEMORY|0:125|40|1|node1|OutOfMemory
47|WEIRD_NEW_STATE|0:0|1|1|node1|None
"""


def test_parse_sacct():
    jobs = commands.parse_sacct(SACCT)
    assert jobs["41"] == states.JobInfo("41", State.COMPLETED, "COMPLETED", 0, 0, 12, 2, "node[1-2]", None, requeues=0)
    assert (jobs["42"].state, jobs["42"].exit_code, jobs["42"].reason) == (State.FAILED, 1, "NonZeroExitCode")
    assert jobs["43"].state == State.CANCELLED and jobs["43"].nodelist is None and jobs["43"].signal == 15
    assert jobs["44"].state == State.RUNNING and jobs["44"].exit_code is None  # not final yet
    assert jobs["45"].state == State.PENDING and jobs["45"].requeues == 1  # the newest run of a requeued job wins
    assert jobs["46"].state == State.FAILED
    assert jobs["47"].state == State.UNKNOWN


def test_parse_squeue():
    jobs = commands.parse_squeue("44|RUNNING|1:02:03|2|node[1-2]|None\n45|PENDING|0:00|1||Resources\n")
    assert jobs["44"].elapsed_s == 3723 and jobs["44"].nodes == 2
    assert jobs["45"].state == State.PENDING and jobs["45"].reason == "Resources" and jobs["45"].nodelist is None


@pytest.mark.parametrize(("text", "job"), [("123\n", "123"), ("123;testbed\n", "123"), ("warning\n124\n", "124")])
def test_parse_sbatch(text, job):
    assert commands.parse_sbatch(text) == job


def test_parse_sbatch_without_id():
    with pytest.raises(ValueError):
        commands.parse_sbatch("sbatch: error: Batch job submission failed\n")


def test_every_mapped_state_and_unknown():
    assert states.state_of("CANCELLED by 1234") == State.CANCELLED
    assert states.state_of("COMPLETING") == State.RUNNING
    assert states.state_of("NEVER_HEARD_OF_IT") == State.UNKNOWN
    assert {s for s in states.SLURM_STATES.values()} == {State.PENDING, State.RUNNING, State.COMPLETED, State.FAILED, State.CANCELLED}


def test_config_value():
    text = "AccountingStorageType   = accounting_storage/slurmdbd\nClusterName             = testbed\n"
    assert config.parse_config_value(text, "ClusterName") == "testbed"
    assert config.parse_config_value(text, "Nope") is None


def test_argv_are_lists_of_words():
    assert commands.sacct_argv(["1", "2"])[:7] == ["sacct", "-X", "-D", "-n", "-P", "-j", "1,2"]
    assert commands.sbatch_argv("a b.sbatch", "/w s") == ["sbatch", "--parsable", "--chdir=/w s", "a b.sbatch"]
    assert commands.sbatch_argv("x", "/w", ["1", "2"])[3:5] == ["--dependency=afterok:1:2", "--kill-on-invalid-dep=yes"]


def test_sinfo_states():
    from orchestrator.slurm.commands import parse_unhealthy

    text = "node1|idle\nnode2|down*\nnode3|drained\nnode4|allocated*\nnode5|mixed\nnode6|draining\n"
    assert parse_unhealthy(text) == ["node2", "node3", "node4", "node6"]
