"""Which pending reasons clear by themselves, and what to do about the ones that do not."""

from __future__ import annotations

import pytest

from orchestrator.slurm.reasons import stuck
from orchestrator.slurm.states import JobInfo, State


def pending(reason, slurm_state="PENDING"):
    return JobInfo("42", State.PENDING, slurm_state, reason=reason)


@pytest.mark.parametrize("reason", ["Priority", "Resources", "Dependency", "BeginTime", "AssocGrpCpuLimit", "QOSMaxJobsPerUserLimit", None])
def test_reasons_that_clear_by_themselves(reason):
    assert stuck(pending(reason)) is None


@pytest.mark.parametrize(
    ("reason", "advice"),
    [
        ("launch failed requeued held", "scontrol release 42"),
        ("JobHeldUser", "scontrol release 42"),
        ("JobHeldAdmin", "scontrol release 42"),
        ("PartitionTimeLimit", "shorter --time"),
        ("QOSMaxWallDurationPerJobLimit", "shorter --time"),
        ("AssocMaxNodesPerJobLimit", "ask for less"),
        ("QOSMaxGRESPerJob", "ask for less"),
        ("AssocGrpCPUMinutesLimit", "compute budget"),
        ("BadConstraints", "--constraint"),
        ("InvalidAccount", "sacctmgr show assoc"),
        ("DependencyNeverSatisfied", "scancel 42"),
        ("PartitionDown", "scancel 42"),
    ],
)
def test_reasons_that_need_someone_to_act(reason, advice):
    found = stuck(pending(reason))
    assert found is not None and found.reason == reason and advice in found.what_to_do


def test_a_held_state_counts_even_without_a_held_reason():
    found = stuck(pending(None, "REQUEUE_HOLD"))
    assert found is not None and "scontrol release 42" in found.what_to_do


def test_only_pending_jobs_are_stuck():
    assert stuck(JobInfo("42", State.RUNNING, "RUNNING", reason="JobHeldUser")) is None
