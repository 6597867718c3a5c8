"""What a decision is about (pool, node, instance) is typed on Decision and survives the
store; the rows keep it under the detail keys they always had, so renderings are unchanged."""

from __future__ import annotations

from provisioner.domain.plan import Decision, ReasonCode
from provisioner.plan.explain import decision_to_dict

T0 = 1_800_000_000.0


def test_pool_node_and_instance_round_trip_as_typed_fields(store) -> None:
    d = Decision(
        "d-1",
        ReasonCode.JOIN_TIMEOUT,
        instance="i-9",
        node="cloud-aws-3",
        pool="aws-a100",
        detail={"state": "joining"},
    )
    store.record_decisions([d], T0)
    got = store.decision("d-1").decision
    assert (got.pool, got.node, got.instance) == ("aws-a100", "cloud-aws-3", "i-9")
    assert got.detail == {"state": "joining"}
    shown = decision_to_dict(got)["detail"]
    assert shown == {
        "state": "joining",
        "pool": "aws-a100",
        "node": "cloud-aws-3",
        "instance": "i-9",
    }


def test_a_decision_about_nothing_keeps_empty_fields(store) -> None:
    store.record_decisions([Decision("d-2", ReasonCode.WAIT_WITHIN_BUDGET, ("7",))], T0)
    got = store.decision("d-2").decision
    assert (got.pool, got.node, got.instance, dict(got.detail)) == ("", "", "", {})
