"""The instance lifecycle table, held over every (from, to) pair of states.

`CloudInstance.transition` must: move an allowed pair and append one history step with the time
and reason; refuse a disallowed pair with `IllegalTransition`, leaving the instance as it was;
treat `to == from` as a no-op. `TERMINATED` has no way out; `FAILED` (also terminal: its record is
closed and billing stopped) leaves only towards termination, for a VM that lives on, and never
comes back into a live state.

The allowed set is written out here by hand from the design (docs/controller.md, DESIGN.md item
4), not read from `TRANSITIONS`, so an accidental change to the table fails this suite.
"""

from __future__ import annotations

from decimal import Decimal
from itertools import product

import pytest

from provisioner.domain.instances import (
    CloudInstance,
    IllegalTransition,
    InstanceState,
    Transition,
)
from provisioner.domain.offers import CapacityType, OfferKey

REQ, ALLOC, JOIN, READY = "requested", "allocated", "joining", "ready"
DRAIN, TING, TED, FAIL = "draining", "terminating", "terminated", "failed"
STATES = (REQ, ALLOC, JOIN, READY, DRAIN, TING, TED, FAIL)
LIVE = (REQ, ALLOC, JOIN, READY, DRAIN)

ALLOWED: frozenset[tuple[str, str]] = frozenset(
    {
        (REQ, ALLOC), (REQ, FAIL), (REQ, TING), (REQ, TED),
        (ALLOC, JOIN), (ALLOC, READY), (ALLOC, TING), (ALLOC, FAIL), (ALLOC, TED),
        (JOIN, READY), (JOIN, TING), (JOIN, FAIL), (JOIN, TED),
        (READY, DRAIN), (READY, TING), (READY, FAIL), (READY, TED),
        (DRAIN, READY), (DRAIN, TING), (DRAIN, FAIL), (DRAIN, TED),
        (TING, TED), (TING, FAIL),
        (FAIL, TING), (FAIL, TED),
    }
)  # fmt: skip

PAIRS = [(a, b) for a, b in product(STATES, STATES) if a != b]
AT, REASON = 1_800_000_123.5, "contract step"


def instance(state: str) -> CloudInstance:
    """An instance that entered `state` once already, so history is non-empty and must be kept."""
    return CloudInstance(
        instance_id="i-0contract",
        pool="aws-a100",
        offer=OfferKey("aws", "us-east-1", "p4d.24xlarge", CapacityType.SPOT),
        gpu_model="A100",
        gpus=8,
        price_usd_hr=Decimal("32.77"),
        state=InstanceState(state),
        launched_ts=1_800_000_000.0,
        history=(Transition(None, InstanceState(state), 1_800_000_050.0, "seed"),),
    )


def test_the_states_are_the_designs_eight() -> None:
    assert {s.value for s in InstanceState} == set(STATES)
    assert {s.value for s in InstanceState if s.terminal} == {TED, FAIL}


@pytest.mark.parametrize(("src", "dst"), PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_every_pair_follows_the_table(src: str, dst: str) -> None:
    before = instance(src)
    if (src, dst) in ALLOWED:
        after = before.transition(InstanceState(dst), AT, REASON)
        assert after.state is InstanceState(dst)
        assert after.history[:-1] == before.history
        step = after.history[-1]
        assert (step.from_state, step.to_state) == (InstanceState(src), InstanceState(dst))
        assert (step.at_ts, step.reason) == (AT, REASON)
        assert after.entered_state_ts == AT
        assert before.state is InstanceState(src)  # the original is a value, not mutated
    else:
        with pytest.raises(IllegalTransition):
            before.transition(InstanceState(dst), AT, REASON)
        assert before == instance(src)


@pytest.mark.parametrize("state", STATES)
def test_to_the_same_state_is_a_no_op(state: str) -> None:
    before = instance(state)
    after = before.transition(InstanceState(state), AT, REASON)
    assert after == before
    assert after.history == before.history


def test_terminated_has_no_way_out() -> None:
    for dst in STATES:
        if dst != TED:
            with pytest.raises(IllegalTransition):
                instance(TED).transition(InstanceState(dst), AT, REASON)


@pytest.mark.parametrize("terminal", [TED, FAIL])
def test_a_terminal_state_never_comes_back_to_life(terminal: str) -> None:
    for dst in LIVE:
        with pytest.raises(IllegalTransition):
            instance(terminal).transition(InstanceState(dst), AT, REASON)
