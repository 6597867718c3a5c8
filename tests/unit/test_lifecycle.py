"""Instance lifecycle: the transition table, history and per-state timeouts."""

from __future__ import annotations

from decimal import Decimal

import pytest

from provisioner.domain.instances import CloudInstance, IllegalTransition, InstanceState
from provisioner.domain.offers import CapacityType, OfferKey

S = InstanceState


def inst(state: S = S.REQUESTED) -> CloudInstance:
    return CloudInstance(
        instance_id="i-1",
        pool="p",
        offer=OfferKey("aws", "r", "t", CapacityType.SPOT),
        gpu_model="A100",
        gpus=8,
        price_usd_hr=Decimal("8"),
        state=state,
        launched_ts=0.0,
    )


def test_happy_path_records_history_with_reasons() -> None:
    i = inst()
    for n, (to, why) in enumerate(
        [
            (S.ALLOCATED, "running"),
            (S.JOINING, "slurmd started"),
            (S.READY, "registered"),
            (S.DRAINING, "idle 600s"),
            (S.TERMINATING, "drained"),
            (S.TERMINATED, "gone"),
        ],
        start=1,
    ):
        i = i.transition(to, float(n), why)
    assert i.state is S.TERMINATED and i.state.terminal
    assert [(t.from_state, t.to_state, t.reason) for t in i.history][:2] == [
        (S.REQUESTED, S.ALLOCATED, "running"),
        (S.ALLOCATED, S.JOINING, "slurmd started"),
    ]
    assert i.entered_state_ts == 6.0


@pytest.mark.parametrize(
    ("start", "to"),
    [
        (S.TERMINATED, S.READY),
        (S.REQUESTED, S.DRAINING),
        (S.TERMINATING, S.READY),
        (S.READY, S.JOINING),
    ],
)
def test_illegal_transitions_raise(start: S, to: S) -> None:
    with pytest.raises(IllegalTransition):
        inst(start).transition(to, 1.0, "no")


def test_same_state_is_a_no_op() -> None:
    i = inst(S.READY)
    assert i.transition(S.READY, 5.0, "again") is i


def test_timeouts_per_state() -> None:
    joining = inst().transition(S.ALLOCATED, 10.0, "x").transition(S.JOINING, 20.0, "y")
    assert not joining.timed_out(20.0 + 600.0)
    assert joining.timed_out(20.0 + 601.0)
    assert not inst(S.READY).timed_out(1e9)  # ready has no timeout
    assert joining.timed_out(30.0, {S.JOINING: 5.0})
