"""The suite's own arrangement (tests/conftest.py): every module that uses the Slurm testbed is
placed in one of the testbed's two xdist groups, and the tests that change the whole cluster
(testbed_exclusive) sit in the second, where the split assumes them."""

from __future__ import annotations

import re

import conftest
from support import ROOT

USES_TESTBED = re.compile(r"\bslurm_testbed\b")


def _testbed_modules() -> set[str]:
    return {path.name for path in (ROOT / "tests/integration").rglob("test_*.py") if USES_TESTBED.search(path.read_text())}


def test_every_testbed_module_is_in_exactly_one_group_and_every_listed_one_exists():
    first, second = conftest._TESTBED_FIRST, conftest._TESTBED_SECOND
    using = _testbed_modules()
    assert len(using) > 20  # the search finds them at all
    assert not first & second, first & second
    assert using - (first | second) == set(), "place these in _TESTBED_FIRST or _TESTBED_SECOND by their --durations"
    assert (first | second) - using == set(), "listed, but no such module uses the testbed"


def test_exclusive_tests_are_in_the_second_group():
    marked = {path.name for path in (ROOT / "tests/integration").rglob("test_*.py") if "testbed_exclusive" in path.read_text()}
    assert marked and marked <= conftest._TESTBED_SECOND, marked - conftest._TESTBED_SECOND
