"""A lifecycle never records a step dated before the one it follows (promise 5's backstop):
the store refuses it with a typed error and writes nothing, on SQLite and PostgreSQL."""

from __future__ import annotations

from decimal import Decimal

import pytest

from provisioner.domain.instances import (
    CloudInstance,
    InstanceState,
    Transition,
    TransitionOutOfOrder,
)
from provisioner.domain.offers import CapacityType, OfferKey

S = InstanceState
T0 = 1_767_225_600.0


def _instance(history: tuple[Transition, ...]) -> CloudInstance:
    return CloudInstance(
        "i-order",
        "burst",
        OfferKey("aws", "us-east-1", "p4d.24xlarge", CapacityType.SPOT),
        "A100",
        8,
        Decimal("9.83"),
        history[-1].to_state,
        T0,
        history=history,
    )


def test_a_step_dated_before_the_last_is_refused_and_nothing_is_written(store):
    store.add_instance(
        _instance(
            (
                Transition(None, S.REQUESTED, T0, "intent"),
                Transition(S.REQUESTED, S.ALLOCATED, T0 + 60, "running", T0 + 20),
            )
        )
    )
    with pytest.raises(TransitionOutOfOrder, match="i-order"):
        store.transition("i-order", S.JOINING, T0 + 59.5, "powering up")
    si = store.instance("i-order")
    assert si is not None and si.instance.state is S.ALLOCATED
    assert [t.to_state for t in si.instance.history] == [S.REQUESTED, S.ALLOCATED]
    # the same step dated at or after its predecessor is recorded, with the cloud's stamp kept
    moved = store.transition("i-order", S.JOINING, T0 + 60, "powering up")
    assert moved.state is S.JOINING
    ended = store.transition("i-order", S.TERMINATED, T0 + 900, "gone", cloud_ts=T0 + 845)
    assert ended.history[-1].cloud_ts == T0 + 845
    stored = store.instance("i-order")
    assert stored is not None
    assert stored.ended_ts == T0 + 845  # billing ends at the cloud's stamp for the end
    assert stored.instance.history[1].cloud_ts == T0 + 20


def test_a_history_that_runs_backwards_is_not_stored(store):
    backwards = _instance(
        (
            Transition(None, S.REQUESTED, T0 + 600, "intent"),
            Transition(S.REQUESTED, S.ALLOCATED, T0, "running"),
        )
    )
    with pytest.raises(TransitionOutOfOrder):
        store.add_instance(backwards)
    assert store.instance("i-order") is None
