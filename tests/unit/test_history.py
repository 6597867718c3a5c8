"""Runtime prediction from history, on runtimes whose averages and spreads are done by hand."""

from __future__ import annotations

import math

import pytest

from provisioner.plan.history import RuntimeHistory


def _hist() -> RuntimeHistory:
    h = RuntimeHistory()
    for rt in (100.0, 300.0, 500.0):
        h.observe(user="ann", group="vision", partition="gpu", runtime_s=rt)
    return h


def test_user_prediction_is_the_mean_of_the_last_two_with_the_spread_of_all_kept() -> None:
    p = _hist().predict(user="ann", group="vision", partition="gpu")
    assert p is not None
    assert (p.runtime_s, p.source, p.samples) == (400.0, "user", 3)
    # sample standard deviation of 100, 300, 500: sqrt((200^2 + 0 + 200^2) / 2) = 200
    assert p.spread_s == pytest.approx(200.0)
    assert p.cv == pytest.approx(0.5)


def test_falls_back_to_group_then_partition_then_limit_then_default() -> None:
    h = _hist()
    g = h.predict(user="bob", group="vision", partition="gpu")
    assert g is not None and (g.runtime_s, g.source) == (400.0, "group")
    q = h.predict(user="bob", group="nlp", partition="gpu")
    assert q is not None and (q.runtime_s, q.source) == (400.0, "partition")
    lim = h.predict(user="bob", group="nlp", partition="cpu", time_limit_s=900)
    assert lim is not None and (lim.runtime_s, lim.source, lim.spread_s) == (900, "limit", None)
    d = h.predict(user="bob", group="nlp", partition="cpu", default_s=60)
    assert d is not None and (d.runtime_s, d.source) == (60, "default")
    assert math.isinf(d.cv)
    assert h.predict(user="bob", group="nlp", partition="cpu") is None


def test_a_time_limit_caps_the_prediction() -> None:
    p = _hist().predict(user="ann", group="vision", partition="gpu", time_limit_s=350)
    assert p is not None and (p.runtime_s, p.source) == (350, "user")


def test_one_sample_predicts_itself_with_unknown_spread() -> None:
    h = RuntimeHistory()
    h.observe(user="ann", group="", partition="gpu", runtime_s=70)
    p = h.predict(user="ann", group="", partition="gpu")
    assert p is not None and (p.runtime_s, p.samples, p.spread_s) == (70, 1, None)


def test_empty_names_and_bad_runtimes_are_not_learned() -> None:
    h = RuntimeHistory()
    h.observe(user="", group="", partition="gpu", runtime_s=50)
    h.observe(user="ann", group="", partition="gpu", runtime_s=0)
    h.observe(user="ann", group="", partition="gpu", runtime_s=math.nan)
    assert h.state() == {"partition:gpu": [50]}
    assert h.observed == 1


def test_state_keeps_the_last_runtimes_and_round_trips() -> None:
    h = RuntimeHistory(keep=2)
    for rt in (100.0, 300.0, 500.0):
        h.observe(user="ann", group="vision", partition="gpu", runtime_s=rt)
    state = h.state()
    assert state == {
        "group:vision": [300.0, 500.0],
        "partition:gpu": [300.0, 500.0],
        "user:ann": [300.0, 500.0],
    }
    back = RuntimeHistory.from_state({**state, "bogus:x": [1.0], "user:": [2.0]}, keep=2)
    assert back.state() == state
    p = back.predict(user="ann", group="vision", partition="gpu")
    assert p is not None and p.runtime_s == 400.0


def test_keep_must_hold_two() -> None:
    with pytest.raises(ValueError, match="keep"):
        RuntimeHistory(keep=1)
