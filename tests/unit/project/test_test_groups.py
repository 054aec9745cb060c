"""The suite's own arrangement (tests/scheduling.py): every module that uses the Slurm testbed is
placed in one of the testbed's xdist groups, and the tests that change the whole cluster
(testbed_exclusive) sit in the one group that runs them last, as one block."""

from __future__ import annotations

import re

import scheduling
from support import ROOT

USES_TESTBED = re.compile(r"\bslurm_testbed\b")


def _testbed_modules() -> set[str]:
    return {path.name for path in (ROOT / "tests/integration").rglob("test_*.py") if USES_TESTBED.search(path.read_text())}


def test_every_testbed_module_is_in_exactly_one_group_and_every_listed_one_exists():
    groups = list(scheduling.TESTBED_GROUPS.values())
    listed = set().union(*groups)
    using = _testbed_modules()
    assert len(using) > 20  # the search finds them at all
    assert sum(map(len, groups)) == len(listed), "a module is in two groups"
    assert using - listed == set(), "place these in a group of scheduling.TESTBED_GROUPS by their --durations"
    assert listed - using == set(), "listed, but no such module uses the testbed"


def test_exclusive_tests_are_in_the_group_that_runs_them_as_one_block():
    marked = {path.name for path in (ROOT / "tests/integration").rglob("test_*.py") if "testbed_exclusive" in path.read_text()}
    home = scheduling.TESTBED_GROUPS[scheduling.EXCLUSIVE_GROUP]
    assert marked and marked <= home, marked - home
