"""The per-token rate window behind the API's 429s (issue 30): a hand-driven clock."""

from __future__ import annotations

import pytest

from provisioner.domain.rate_window import MAX_CALLERS, RateWindow


def test_the_nth_plus_one_event_in_a_minute_waits_for_the_oldest_to_leave():
    w = RateWindow(3)
    assert [w.admit("a", t) for t in (0.0, 10.0, 20.0)] == [None, None, None]
    assert w.admit("a", 30.0) == 30  # the event at 0 s leaves the window at 60 s
    assert w.admit("a", 59.5) == 1  # never less than a second
    assert w.admit("a", 60.0) is None  # refused events were not counted
    assert w.admit("a", 61.0) == 9


def test_callers_are_counted_apart():
    w = RateWindow(1)
    assert w.admit("a", 0.0) is None
    assert w.admit("b", 0.0) is None
    assert w.admit("a", 1.0) == 59


def test_a_flood_of_distinct_callers_does_not_grow_the_table_without_bound():
    w = RateWindow(1)
    for i in range(MAX_CALLERS + 5):
        w.admit(f"t{i}", 0.0)
    assert w.admit("late", 120.0) is None
    assert len(w._recent) == 1


def test_a_limit_below_one_is_refused():
    with pytest.raises(ValueError, match="per_minute"):
        RateWindow(0)
