"""A partition's memory request (mem_per_gpu on shared partitions, mem on whole-node ones): a
Slurm size, one of the two, within the node; a bad one is one problem naming the key, and the
CLI says it in one message, exit 2, no traceback."""

from __future__ import annotations

import pytest
from support import invoke

from orchestrator.config import profile
from orchestrator.errors import ProfileError

PARTITION = '    debug: {max_nodes: 2, max_time: "01:00:00", whole_node: true}'


def profile_file(tmp_path, partition: str):
    text = profile.load("testbed").text
    assert PARTITION in text
    path = tmp_path / "p.yaml"
    path.write_text(text.replace(PARTITION, partition, 1))
    return path


def problems_of(tmp_path, partition: str) -> list[str]:
    with pytest.raises(ProfileError) as err:
        profile.load(str(profile_file(tmp_path, partition)))
    return err.value.problems


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("mem: lots", "scheduler.partitions.debug.mem 'lots': expected a Slurm memory size, a whole number with K, M, G or T"),
        ("mem_per_gpu: 60GB", "scheduler.partitions.debug.mem_per_gpu '60GB': expected a Slurm memory size"),
        ("mem_per_gpu: '0'", "scheduler.partitions.debug.mem_per_gpu '0': expected a Slurm memory size"),
        (
            "mem: 4G, mem_per_gpu: 1G",
            "scheduler.partitions.debug: give mem_per_gpu (partitions that share nodes) or mem (whole nodes), not both",
        ),
        ("mem: 8G", "scheduler.partitions.debug: asks 8 GiB per node, more than the node's 4 GB (node.memory_gb)"),
        ("mem_per_gpu: 2G", "asks 8 GiB per node, more than the node's 4 GB"),  # 4 GPUs x 2G
        ("mem_per_gpu: 1G, cpus_per_node: 8", "mem_per_gpu: the partition's nodes are not the profile's GPU nodes (it has cpus_per_node)"),
    ],
)
def test_a_bad_memory_request_is_one_problem_naming_the_key(tmp_path, extra, expected):
    found = problems_of(tmp_path, PARTITION[:-1] + f", {extra}}}")
    assert len(found) == 1 and expected in found[0], found


@pytest.mark.parametrize("size", ["3G", "1024M", "1024", "900K", "3072M"])
def test_slurm_sizes_are_accepted(tmp_path, size):
    loaded = profile.load(str(profile_file(tmp_path, PARTITION[:-1] + f", mem: '{size}'}}")))
    assert loaded.profile.scheduler.partitions["debug"].mem == size


def test_the_cli_says_it_once_and_exits_2(tmp_path):
    path = profile_file(tmp_path, PARTITION[:-1] + ", mem: lots}")
    result = invoke("clusters", "show", str(path))
    assert result.exit_code == 2, result.output
    assert result.output.count("mem 'lots'") == 1 and "Traceback" not in result.output


def test_lumi_asks_what_its_documentation_asks():
    parts = profile.load("lumi").profile.scheduler.partitions
    assert (parts["small-g"].mem_per_gpu, parts["dev-g"].mem_per_gpu, parts["standard-g"].mem) == ("60G", "60G", "480G")
    assert parts["small"].mem is None and parts["small"].mem_per_gpu is None  # LUMI-C: the per-CPU default
    for name in ("frontier", "juwels-booster"):  # docs silent: nothing requested (docs/reference/site-conventions.md)
        assert all(p.mem is None and p.mem_per_gpu is None for p in profile.load(name).profile.scheduler.partitions.values())
