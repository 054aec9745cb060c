"""Shared patterns (orchestrator/util/patterns.py): what a runtime template may hold."""

from orchestrator.util import patterns


def test_runtime_problems():
    assert patterns.runtime_problems("/a/${B}/c") == []
    assert patterns.runtime_problems("/a/$B") and patterns.runtime_problems("$(id)")
