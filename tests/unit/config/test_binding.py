"""CPU masks: derivation from topology, and validation of derived or explicit masks."""

import pytest

from orchestrator.config import binding, profile

LUMI_OFFICIAL = "0xfe000000000000,0xfe00000000000000,0xfe0000,0xfe000000,0xfe,0xfe00,0xfe00000000,0xfe0000000000"
# Seed 000's list, copied between slides: its first two masks are the same CCD.
SEED_000 = "0xfe000000000000,0xfe000000000000,0xfe0000,0xfe000000,0xfe,0xfe00,0xfe00000000,0xfe0000000000"


@pytest.mark.parametrize(
    ("text", "cores"),
    [("0", {0}), ("1-3", {1, 2, 3}), ("0,4", {0, 4}), ("0-1, 8-9", {0, 1, 8, 9})],
)
def test_cpulist_round_trip(text, cores):
    assert binding.parse_cpulist(text) == cores
    assert binding.parse_cpulist(binding.format_cpulist(cores)) == cores


@pytest.mark.parametrize("bad", ["", "a", "3-1", "1,,2", "-1", "1-"])
def test_cpulist_rejects_malformed(bad):
    with pytest.raises(ValueError):
        binding.parse_cpulist(bad)


def test_masks_and_cores_are_inverse():
    assert binding.mask_of(frozenset(range(49, 56))) == "0xfe000000000000"
    assert binding.cores_of("0xFE") == set(range(1, 8))
    assert binding.cores_of(254) == set(range(1, 8))
    for bad in ["fe", "0x", "0xzz", True]:
        with pytest.raises(ValueError):
            binding.cores_of(bad)


@pytest.mark.parametrize("name", ["lumi", "frontier"])
def test_derived_masks_equal_the_official_lumi_list(name):
    node = profile.load(name).profile.node
    assert ",".join(node.binding(8).masks) == LUMI_OFFICIAL
    assert node.binding(8).srun_value == "mask_cpu:" + LUMI_OFFICIAL


def test_fewer_tasks_take_the_masks_of_the_first_gpus():
    node = profile.load("lumi").profile.node
    assert node.binding(2).masks == tuple(LUMI_OFFICIAL.split(",")[:2])


def test_gpus_sharing_a_socket_split_its_cores():
    socket0, socket1 = binding.parse_cpulist("0-31"), binding.parse_cpulist("32-63")
    b = binding.derive([socket0, socket0, socket1, socket1], frozenset({0, 32}), 4)
    # 31 usable cores per socket: 15 each, in order, none shared, none reserved.
    assert [binding.format_cpulist(c) for c in b.cores] == ["1-15", "16-30", "33-47", "48-62"]
    assert binding.problems(b, 4, 64, frozenset({0, 32})) == []


def test_seed_000_masks_are_caught_naming_the_tasks():
    masks = binding.Binding(tuple(binding.cores_of(m) for m in SEED_000.split(",")))
    problems = binding.problems(masks, 8, 128, frozenset(range(0, 64, 8)))
    assert problems == ["tasks 0 and 1 share cores 49-55 (0xfe000000000000 and 0xfe000000000000)"]


def test_problems_name_missing_reserved_and_count():
    masks = binding.Binding((frozenset({0, 1}), frozenset({200}), frozenset()))
    problems = binding.problems(masks, 4, 128, frozenset({0}))
    assert "3 CPU mask(s) for 4 task(s) per node: need exactly one mask per task" in problems
    assert any("task 1" in p and "200 the node lacks" in p for p in problems)
    assert any("task 0" in p and "reserved cores 0" in p for p in problems)
    assert "task 2: empty CPU mask" in problems


def test_explicit_masks_win_over_derivation():
    node = profile.load("lumi").profile.node
    import dataclasses

    explicit = dataclasses.replace(node, cpu_masks=tuple(reversed(LUMI_OFFICIAL.split(","))))
    assert explicit.binding(8).masks == tuple(reversed(LUMI_OFFICIAL.split(",")))
