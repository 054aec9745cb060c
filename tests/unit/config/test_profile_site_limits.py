"""Bad values of the site-limit keys a profile may carry (max_time_by_nodes, slurm_partition,
extra_options): each a problem naming the key, the profile refused as a whole."""

from __future__ import annotations

import pytest

from orchestrator.config import profile, profile_checks
from orchestrator.config.profile_checks import PLANNED_OPTIONS
from orchestrator.errors import ProfileError

PARTITION = '    debug: {max_nodes: 2, max_time: "01:00:00", whole_node: true}'


def problems_of(tmp_path, partition: str = PARTITION, scheduler_extra: str = "") -> list[str]:
    text = profile.load("testbed").text
    assert PARTITION in text
    text = text.replace(PARTITION, partition, 1)
    if scheduler_extra:
        text = text.replace("  partitions:\n", f"  {scheduler_extra}\n  partitions:\n", 1)
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError) as err:
        profile.load(str(path))
    return err.value.problems


@pytest.mark.parametrize(
    ("partition", "expected"),
    [
        (
            PARTITION[:-1] + ', max_time_by_nodes: {2: "00:30:00"}}',
            "max_time_by_nodes: 2 nodes is not a size below the partition's max_nodes 2",
        ),
        (PARTITION[:-1] + ', max_time_by_nodes: {0: "00:30:00"}}', "max_time_by_nodes: 0 nodes is not a size below"),
        (PARTITION[:-1] + ', max_time_by_nodes: {1: "soon"}}', "scheduler.partitions.debug.max_time_by_nodes.1:"),
        (PARTITION[:-1] + ", slurm_partition: 'batch;rm'}", "slurm_partition 'batch;rm' has characters Slurm directives cannot carry"),
    ],
)
def test_bad_partition_limits_are_named(tmp_path, partition, expected):
    assert any(expected in p for p in problems_of(tmp_path, partition)), problems_of(tmp_path, partition)


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ('extra_options: ["network=x"]', "'network=x' is not --name or --name=value"),
        ('extra_options: ["--network=a b"]', "is not --name or --name=value"),
        ('extra_options: ["--time=01:00:00"]', "--time is set by the orchestrator itself"),
        # Where the job's output goes: the log that status, logs and a failed run show (issue 33).
        ('extra_options: ["--error=/tmp/elsewhere.err"]', "--error is set by the orchestrator itself; leave it out (the orchestrator sets"),
        ('extra_options: ["--output=x.log"]', "--output is set by the orchestrator itself"),
        ('extra_options: ["--err=x"]', "'--err=x' is --error, which is set by the orchestrator itself"),
        ('extra_options: ["-e"]', "'-e' is --error; leave it out"),
        ('extra_options: ["-o/tmp/x"]', "'-o/tmp/x' is --output; leave it out"),
        ('extra_options: ["-w"]', "'-w' is not --name or --name=value (write the long form"),
        ('extra_options: ["--chdir=/tmp"]', "--chdir is set by the orchestrator itself"),
    ],
)
def test_bad_extra_options_are_named(tmp_path, option, expected):
    found = problems_of(tmp_path, scheduler_extra=option)
    assert any(expected in p for p in found), found


def test_the_refusal_lists_the_options_the_orchestrator_sets():
    found = profile_checks.extra_option_problem("--error=x")
    assert "--error" in found and all(f"--{o}" in found for o in PLANNED_OPTIONS)


@pytest.mark.parametrize("option", ["--network=disable_rdzv_get", "--gpus=8", "--ntasks=4", "--mail-type=END", "--time-min=00:10:00"])
def test_site_options_the_orchestrator_does_not_set_are_accepted(option):
    assert profile_checks.extra_option_problem(option) is None
