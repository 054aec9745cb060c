"""The one poller (orchestrator/util/poll.py): waits that grow to a most, a deadline and a count of
tries on an injected clock, and the one reader of ORCH_POLL_FIRST_S / ORCH_POLL_MAX_S."""

from __future__ import annotations

import pytest
from fakes import FakeClock

from orchestrator.errors import ConfigError
from orchestrator.util.poll import Backoff, Poller, seconds_setting


def test_waits_grow_by_the_factor_up_to_the_most():
    clock = FakeClock()
    poller = Poller(Backoff(first_s=1, factor=1.5, max_s=4), clock=clock)
    for _ in range(6):
        assert poller.sleep()
    assert clock.sleeps == [1, 1.5, 2.25, 3.375, 4, 4] and poller.next_s == 4
    assert Backoff(60, 2, float("inf")).waits(3) == (60, 120, 240)


def test_a_deadline_or_a_count_of_tries_ends_the_waiting():
    clock = FakeClock()
    poller = Poller(Backoff(first_s=2, factor=2, max_s=8), clock=clock, deadline_s=10)
    while poller.sleep():
        pass
    assert clock.sleeps == [2, 4, 8] and poller.expired and not poller.sleep()
    clock = FakeClock()
    poller = Poller(Backoff(1, 2, 8), clock=clock, tries=2)
    assert [poller.sleep(), poller.sleep(), poller.sleep()] == [True, True, False] and clock.sleeps == [1, 2]


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "soon", "1e9"])
def test_a_bad_setting_is_one_clear_error_naming_it(monkeypatch, value):
    monkeypatch.setenv("ORCH_POLL_MAX_S", value)
    with pytest.raises(ConfigError, match=r"environment variable ORCH_POLL_MAX_S=.* is not a number of seconds between 0 and 86400"):
        Backoff.from_environment(first_s=1, factor=2, max_s=10)


def test_settings_replace_the_callers_defaults(monkeypatch):
    monkeypatch.delenv("ORCH_POLL_FIRST_S", raising=False)
    monkeypatch.setenv("ORCH_POLL_MAX_S", "0.2")
    assert Backoff.from_environment(first_s=1, factor=2, max_s=10) == Backoff(1, 2, 0.2)
    assert seconds_setting("ORCH_POLL_FIRST_S", 0.5) == 0.5
