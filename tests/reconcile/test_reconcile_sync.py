"""The pure sync rules (`plan_sync`): adoption, binding, lifecycle steps, sweep, stale views."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

from provisioner.act.ports import CloudState, OwnedInstance
from provisioner.domain.instances import CloudInstance, InstanceState, Transition
from provisioner.domain.nodes import Node, NodeKind, NodeState
from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.domain.records import Intent, StoredInstance
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.reconcile.loop import error_code, rebuild_backoff
from provisioner.reconcile.sync import SyncInput, plan_sync

S = InstanceState
NOW = 1_767_225_600.0
CTL = "burst-ctl"
OFFER = OfferKey("aws", "us-east-1", "p4d.24xlarge", CapacityType.SPOT)
GROUP = "burst-ctl-burst-us-east-1-p4d-24xlarge-spot"


def owned(
    iid: str,
    state: CloudState = CloudState.RUNNING,
    launched: float = NOW - 30,
    controller: str = CTL,
    group: str = GROUP,
    ip: str = "",
    named: str = "",
) -> OwnedInstance:
    return OwnedInstance(
        iid,
        "aws",
        "us-east-1",
        "us-east-1a",
        "p4d.24xlarge",
        state,
        launched,
        group=group,
        tags={"controller": controller, "decision": "d-1"},
        private_ip=ip,
        named_node=named,
    )


def record(iid: str, state: S, *, node: str = "", since: float = NOW - 30) -> StoredInstance:
    hist = (Transition(None, S.REQUESTED, since - 10, "intent"),)
    if state is not S.REQUESTED:
        hist += (Transition(S.REQUESTED, state, since, "test"),)
    inst = CloudInstance(
        iid,
        "burst",
        OFFER,
        "A100",
        8,
        Decimal("7.246"),
        state,
        since - 10,
        decision_id="d-1",
        node_name=node,
        history=hist,
    )
    return StoredInstance(inst, team="vision", intent_token="tok-1")


def intent(nodes: int = 1, status: str = "confirmed") -> Intent:
    return Intent(
        token="tok-1",
        kind="scale_up",
        status=status,
        created_ts=NOW - 40,
        pool="burst",
        offer=str(OFFER),
        nodes=nodes,
        decision_id="d-1",
        team="vision",
        price_usd_hr=Decimal("7.246"),
        payload={"group": GROUP, "gpus": 8, "gpu_model": "A100", "target": nodes},
        result={"added": nodes},
    )


def node(name: str, state: NodeState, alloc: int = 0, address: str = "") -> Node:
    return Node(
        name,
        NodeKind.BURST,
        8,
        alloc,
        "a100",
        state,
        ("cloud",),
        ("cloud",),
        100,
        pool="burst",
        address=address,
    )


def sync(
    records=(),
    own=(),
    nodes=(),
    intents=(),
    stale=False,
    complete=True,
    now=NOW,
    first_seen=None,
    first_request_ts=None,
    skew_s=None,
    set_addresses=True,
):
    snap = ClusterSnapshot(taken_ts=now, nodes=tuple(nodes))
    if stale:
        snap = snap.mark_stale("slurm: timed out")
    # unless a test says otherwise, the controller has listed each instance since its launch
    seen = {o.instance_id: o.launched_ts for o in own} if first_seen is None else first_seen
    return plan_sync(
        SyncInput(
            now,
            CTL,
            list(records),
            list(own),
            complete,
            snap,
            list(intents),
            grace_s=120,
            join_timeout_s=600,
            retry_terminate_s=120,
            first_seen=seen,
            first_request_ts=first_request_ts,
            skew_s=skew_s or {},
            set_addresses=set_addresses,
        )
    )


def test_adopts_an_unknown_tagged_instance_into_the_intent_that_launched_it():
    p = sync(own=[owned("i-1"), owned("i-2")], intents=[intent(nodes=1)])
    assert [a.instance.instance_id for a in p.adopt] == ["i-1"]  # the intent had room for one
    inst = p.adopt[0].instance
    assert (inst.state, inst.pool, inst.price_usd_hr, inst.gpus) == (
        S.ALLOCATED,
        "burst",
        Decimal("7.246"),
        8,
    )
    assert [t.to_state for t in inst.history] == [S.REQUESTED, S.ALLOCATED]
    # dated when the controller saw it running; billed from the cloud's launch stamp
    assert (inst.history[-1].at_ts, inst.history[-1].cloud_ts) == (NOW, NOW - 30)
    # i-2 has no intent: an orphan, swept only after the grace period
    assert p.kills == ()
    later = sync(own=[owned("i-2", launched=NOW - 500)], intents=[])
    assert [k.instance_id for k in later.kills] == ["i-2"]
    # ... and recorded first, from its tags, so its running time reaches the ledger
    (rec,) = later.orphans
    assert (rec.instance_id, rec.origin, rec.launched_ts) == ("i-2", "orphan", NOW - 500)


def test_a_group_replacement_adopted_by_a_later_intent_is_billed_from_its_launch():
    # The group replaced an interrupted instance at NOW - 180 on its own; the controller's
    # next scale-up intent (NOW - 40) adopts it. The cloud has billed since the launch, so the
    # ledger must too (the chaos soak found 120 s of such a machine outside the books).
    # The scale-up that sized the group asked for it, before the intent adopting it: on a
    # cloud whose clock is measured, its stamp is billed.
    p = sync(
        own=[owned("i-r", launched=NOW - 180)],
        intents=[intent(nodes=1)],
        skew_s={"aws": 0.0},
    )
    (a,) = p.adopt
    assert a.instance.history[-1].to_state is S.ALLOCATED
    assert a.instance.history[-1].cloud_ts == NOW - 180
    assert p.warnings == ()


def test_a_launch_stamp_before_any_request_is_clamped_to_the_request_and_named():
    """A cloud clock 3 minutes behind and no skew measured yet: billing starts at the request,
    never before it, and a warning names the instance and the gap."""
    p = sync(own=[owned("i-s", launched=NOW - 220)], intents=[intent(nodes=1)])
    (a,) = p.adopt
    assert a.instance.history[-1].cloud_ts == NOW - 40  # the intent's creation
    (w,) = p.warnings
    assert "i-s" in w and "180 s before it was requested" in w


def test_cloud_stamps_are_translated_by_the_measured_skew():
    """The cloud's clock runs 10 minutes ahead: its launch stamp NOW + 570 is NOW - 30 on the
    controller's clock."""
    p = sync(
        own=[owned("i-1", launched=NOW + 570)],
        intents=[intent(nodes=1)],
        skew_s={"aws": 600.0},
    )
    (a,) = p.adopt
    assert a.instance.history[-1].cloud_ts == NOW - 30
    assert p.warnings == ()


def test_a_launch_stamp_in_the_future_is_clamped_to_now_and_named():
    p = sync(own=[owned("i-f", launched=NOW + 3600)], intents=[intent(nodes=1)])
    (a,) = p.adopt
    assert a.instance.history[-1].cloud_ts == NOW
    (w,) = p.warnings
    assert "i-f" in w and "3600 s in the future" in w


def test_the_orphan_grace_counts_from_when_the_controller_first_saw_it():
    """A cloud clock an hour behind makes a fresh orphan look an hour old: it is kept until
    it has been listed for the grace period on the controller's own clock."""
    stray = owned("i-2", launched=NOW - 3600)
    first = sync(own=[stray], first_seen={"i-2": NOW})
    assert first.kills == () and first.orphans == ()
    later = sync(own=[stray], first_seen={"i-2": NOW - 121})
    assert [k.instance_id for k in later.kills] == ["i-2"]


def test_binds_to_the_node_slurm_powers_up_then_joins_and_readies():
    p = sync(
        [record("i-1", S.ALLOCATED)],
        [owned("i-1")],
        [node("burst-1", NodeState.POWERED_DOWN), node("burst-2", NodeState.POWERING_UP)],
    )
    assert [(b.instance_id, b.node) for b in p.bind] == [("i-1", "burst-2")]
    assert [(m.instance_id, m.to) for m in p.moves] == [("i-1", S.JOINING)]
    p = sync(
        [record("i-1", S.JOINING, node="burst-2")],
        [owned("i-1")],
        [node("burst-2", NodeState.ALLOCATED, 8)],
    )
    assert [(m.to, m.reason) for m in p.moves] == [(S.READY, "burst-2 registered with slurm")]


def test_each_bound_instance_is_named_its_own_node_whatever_its_launch_order():
    # Two instances of one scale-up, the later-launched listed first: each is named the node
    # the store bound it to, by its instance id, once the cloud lists its address.
    nodes = [node("burst-1", NodeState.POWERING_UP), node("burst-2", NodeState.POWERING_UP)]
    p = sync(
        [record("i-1", S.ALLOCATED), record("i-2", S.ALLOCATED)],
        [owned("i-2", launched=NOW - 10, ip="10.0.0.12"), owned("i-1", ip="10.0.0.11")],
        nodes,
    )
    bound = {b.instance_id: b.node for b in p.bind}
    named = {n.instance.instance_id: (n.node, n.instance.private_ip) for n in p.names}
    assert named == {iid: (bound[iid], f"10.0.0.1{iid[-1]}") for iid in ("i-1", "i-2")}
    assert len(set(bound.values())) == 2
    # Named already (the listing shows it): nothing to do; no address yet: not named yet.
    p = sync(
        [record("i-1", S.JOINING, node="burst-1"), record("i-2", S.JOINING, node="burst-2")],
        [owned("i-1", ip="10.0.0.11", named="burst-1"), owned("i-2")],
        nodes,
    )
    assert p.names == ()
    # Named otherwise on the cloud (someone retagged it): named again as the store binds it.
    p = sync(
        [record("i-1", S.JOINING, node="burst-1")],
        [owned("i-1", ip="10.0.0.11", named="burst-2")],
        nodes,
    )
    assert [(n.instance.instance_id, n.node) for n in p.names] == [("i-1", "burst-1")]


def test_a_node_gets_its_instance_address_before_its_name_unless_slurm_takes_it_itself():
    nodes = [node("burst-1", NodeState.POWERING_UP)]
    p = sync([record("i-1", S.ALLOCATED)], [owned("i-1", ip="10.0.0.11")], nodes)
    assert [(n.node, n.address) for n in p.names] == [("burst-1", "10.0.0.11")]
    p = sync(
        [record("i-1", S.ALLOCATED)], [owned("i-1", ip="10.0.0.11")], nodes, set_addresses=False
    )
    assert [(n.node, n.address) for n in p.names] == [("burst-1", "")]


def test_a_node_answering_at_another_address_is_drained_with_an_alert_once():
    rec, own = record("i-1", S.READY, node="burst-1"), owned("i-1", ip="10.0.0.11")
    # its own address, or none set yet (Slurm shows the node's name): nothing to do
    for addr in ("10.0.0.11", "burst-1", ""):
        p = sync([rec], [own], [node("burst-1", NodeState.IDLE, address=addr)])
        assert (p.mismatches, p.nodes) == ((), ()), addr
    # another machine registered as burst-1 (or someone moved its NodeAddr)
    p = sync([rec], [own], [node("burst-1", NodeState.ALLOCATED, 8, address="10.0.0.66")])
    (mm,) = p.mismatches
    assert (mm.instance_id, mm.node, mm.expected, mm.found) == (
        "i-1",
        "burst-1",
        "10.0.0.11",
        "10.0.0.66",
    )
    assert [(f.node, f.action) for f in p.nodes] == [("burst-1", "drain")]
    assert "10.0.0.66" in p.nodes[0].reason and "10.0.0.11" in p.nodes[0].reason
    # already draining: not drained (nor alerted) again
    p = sync([rec], [own], [node("burst-1", NodeState.DRAINING, 8, address="10.0.0.66")])
    assert p.mismatches == ()
    # a stale Slurm view, or slurmctld taking addresses from registrations: no verdict
    p = sync([rec], [own], [node("burst-1", NodeState.IDLE, address="10.0.0.66")], stale=True)
    assert p.mismatches == ()
    p = sync(
        [rec], [own], [node("burst-1", NodeState.IDLE, address="10.0.0.66")], set_addresses=False
    )
    assert p.mismatches == ()


def test_join_failures_terminate_and_fail_the_node():
    p = sync(
        [record("i-1", S.JOINING, node="burst-1", since=NOW - 700)],
        [owned("i-1")],
        [node("burst-1", NodeState.POWERING_UP)],
    )
    (k,) = p.kills
    assert (k.instance_id, k.fail_node, k.join_failure, k.transition) == (
        "i-1",
        "burst-1",
        True,
        True,
    )
    p = sync(
        [record("i-1", S.JOINING, node="burst-1")],
        [owned("i-1")],
        [node("burst-1", NodeState.DOWN)],
    )
    assert [k.fail_node for k in p.kills] == ["burst-1"]


def test_a_node_slurm_drains_as_it_joins_is_a_join_failure_with_slurms_reason():
    why = "gres/gpu count reported lower than configured (4 < 8)"
    drained = replace(node("burst-1", NodeState.DRAINED), reason=why)
    p = sync([record("i-1", S.JOINING, node="burst-1")], [owned("i-1")], [drained])
    (k,) = p.kills
    assert k.join_failure and k.instance_id == "i-1" and p.moves == ()
    assert k.reason == f"slurm drained burst-1 as it joined: {why}"
    # once serving, a drain is the controller's scale-down, not a failed join
    p = sync([record("i-1", S.READY, node="burst-1")], [owned("i-1")], [drained])
    assert [m.to for m in p.moves] == [S.DRAINING] and p.kills == ()


def test_scale_down_follows_slurm():
    drained = sync(
        [record("i-1", S.READY, node="burst-1")],
        [owned("i-1")],
        [node("burst-1", NodeState.DRAINING, 4)],
    )
    assert [m.to for m in drained.moves] == [S.DRAINING] and drained.kills == ()
    off = sync(
        [record("i-1", S.DRAINING, node="burst-1")],
        [owned("i-1")],
        [node("burst-1", NodeState.POWERING_DOWN)],
    )
    assert [(k.instance_id, k.fail_node) for k in off.kills] == [("i-1", "")]
    gone = sync([record("i-1", S.TERMINATING, node="burst-1")], [], [])
    assert [m.to for m in gone.moves] == [S.TERMINATED]
    partial = sync([record("i-1", S.TERMINATING, node="burst-1")], [], [], complete=False)
    assert partial.moves == ()


def test_spot_reclaim_fails_the_instance_and_its_node():
    p = sync(
        [record("i-1", S.READY, node="burst-1")],
        [owned("i-1", CloudState.STOPPING)],
        [node("burst-1", NodeState.ALLOCATED, 8)],
    )
    assert [m.to for m in p.moves] == [S.FAILED]
    assert [(f.node, f.action) for f in p.nodes] == [("burst-1", "fail")]


def test_a_stale_view_does_nothing_destructive():
    recs = [record("i-1", S.READY, node="burst-1"), record("i-2", S.REQUESTED)]
    p = sync(
        recs,
        [owned("i-1"), owned("i-2"), owned("i-9", launched=NOW - 9999)],
        [node("burst-1", NodeState.POWERED_DOWN)],
        stale=True,
    )
    assert p.kills == () and p.nodes == () and p.bind == ()
    assert [(m.instance_id, m.to) for m in p.moves] == [("i-2", S.ALLOCATED)]  # cloud-only


def test_down_burst_nodes_without_an_instance_return_to_service():
    p = sync([], [], [node("burst-1", NodeState.DOWN), node("burst-2", NodeState.POWERED_DOWN)])
    assert [(f.node, f.action) for f in p.nodes] == [("burst-1", "resume")]


def test_backoff_is_rebuilt_from_stored_outcomes():
    from provisioner.act.backoff_feed import BackoffSettings
    from provisioner.domain.errors import CapacityError, ThrottlingError

    assert error_code(CapacityError("x", code="InsufficientInstanceCapacity")) == (
        "capacity:InsufficientInstanceCapacity"
    )
    assert error_code(ThrottlingError("x", code="Throttling")) == "throttling:Throttling"
    failed = Intent(
        "a",
        "scale_up",
        "failed",
        NOW,
        offer=str(OFFER),
        completed_ts=NOW,
        error_code="capacity:InsufficientInstanceCapacity",
    )
    throttled = Intent(
        "b",
        "scale_up",
        "failed",
        NOW,
        offer=str(OFFER),
        completed_ts=NOW + 1,
        error_code="throttling:Throttling",
    )
    b = rebuild_backoff([failed, throttled], BackoffSettings(300, 3600))
    assert b.blocked(OFFER, NOW + 299) and not b.blocked(OFFER, NOW + 301)
    ok = Intent("c", "scale_up", "confirmed", NOW + 5, offer=str(OFFER), completed_ts=NOW + 5)
    assert rebuild_backoff([failed, ok], BackoffSettings(300, 3600)).entries == {}


def test_a_vm_that_vanished_is_billed_until_the_controller_first_missed_it():
    """GCE forgets a deleted VM: no end stamp. Closed by the sweep passes later, its billing
    ends when a complete listing first lacked it, not when the sweep got round to it."""
    gone = record("i-1", S.READY, node="burst-1")
    # the sweep waits out its grace period from the state's entry; here it is long past
    p = plan_sync(
        SyncInput(
            NOW + 300,
            CTL,
            [gone],
            [],
            True,
            ClusterSnapshot(taken_ts=NOW + 300, nodes=(node("burst-1", NodeState.IDLE),)),
            grace_s=120,
            gone_since={"i-1": NOW},
        )
    )
    (m,) = [m for m in p.moves if m.instance_id == "i-1"]
    assert (m.to, m.cloud_ts) == (S.FAILED, NOW)


def test_a_vm_this_controller_terminated_ends_at_the_call_or_when_last_seen_alive():
    """GCE forgets a deleted VM: billing ends at the terminate call, or later if a listing still
    showed it alive after the call; never when a pass (blind for a while) noticed it missing."""
    rec = record("i-1", S.TERMINATING, since=NOW - 180)  # the terminate call at NOW - 180
    p = sync([rec], [], now=NOW)
    (m,) = p.moves
    assert (m.to, m.cloud_ts) == (S.TERMINATED, NOW - 180)
    p = plan_sync(
        SyncInput(
            NOW, CTL, [rec], [], True, ClusterSnapshot(taken_ts=NOW), last_alive={"i-1": NOW - 120}
        )
    )
    (m,) = p.moves
    assert m.cloud_ts == NOW - 120


def test_listing_memory_keeps_what_the_controller_saw():
    from provisioner.reconcile.listing_memory import ListingMemory

    mem = ListingMemory()
    alive = owned("i-1")
    mem.observe([alive], True, ["i-1"], NOW)
    mem.observe([alive], False, ["i-1", "i-2"], NOW + 60)  # partial: nothing is missing
    assert mem.first_seen == {"i-1": NOW} and mem.last_alive == {"i-1": NOW + 60}
    assert mem.gone_since == {}
    mem.observe([], True, ["i-1", "i-2"], NOW + 120)
    assert mem.gone_since == {"i-1": NOW + 120, "i-2": NOW + 120}
    mem.observe([], True, ["i-1"], NOW + 180)  # i-2's record closed; i-1 still missing
    assert mem.gone_since == {"i-1": NOW + 120}
    mem.observe([alive], True, ["i-1"], NOW + 240)  # listed again: not gone after all
    assert mem.gone_since == {} and mem.last_alive["i-1"] == NOW + 240
