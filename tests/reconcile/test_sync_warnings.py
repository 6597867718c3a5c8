"""The pure sync rules for spot warnings: signal, requeue inside the window, end the instance.

Times are worked by hand from the documented windows: AWS's notice gives 2 minutes, GCE's
preemption about 30 seconds; the policy here signals, waits `checkpoint_s` = 20 s, and keeps
`margin_s` = 5 s before the VM goes.
"""

from __future__ import annotations

from provisioner.config.models import Interruptions
from provisioner.domain.nodes import NodeState
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.domain.spot_warnings import SpotWarning, WarningKind
from provisioner.reconcile.sync import SyncInput, plan_sync
from tests.reconcile.test_reconcile_sync import CTL, NOW, S, node, owned, record

IP = "10.77.0.21"
POLICY = Interruptions(signal="USR1", checkpoint_s=20, margin_s=5)


def warned(kind=WarningKind.INTERRUPTION, *, at=NOW, action=None, source=IP):
    return SpotWarning("burst-1", "i-1", kind, noticed_ts=at, action_ts=action, source=source)


def sync(warnings, *, now=NOW, busy=True, signalled=None, stale=False, state=NodeState.ALLOCATED):
    n = node("burst-1", state if busy else NodeState.IDLE, alloc=8 if busy else 0, address=IP)
    snap = ClusterSnapshot(taken_ts=now, nodes=(n,))
    if stale:
        snap = snap.mark_stale("slurm: timed out")
    return plan_sync(
        SyncInput(
            now,
            CTL,
            [record("i-1", S.READY, node="burst-1")],
            [owned("i-1", ip=IP, named="burst-1")],
            True,
            snap,
            first_seen={"i-1": NOW - 30},
            warnings={"i-1": tuple(warnings)},
            signalled=signalled or {},
            interruptions=POLICY,
        )
    )


def test_an_interruption_notice_signals_the_running_jobs_first_and_asks_for_a_pass_later():
    p = sync([warned(action=NOW + 120)])
    assert [(s.node, s.signal) for s in p.signals] == [("burst-1", "USR1")]
    assert p.kills == ()  # the jobs get their checkpoint time first
    assert p.wake_at == NOW + 20  # signalled now + checkpoint_s


def test_the_jobs_are_requeued_and_the_instance_ended_once_the_checkpoint_time_is_over():
    waiting = sync([warned(action=NOW + 120)], now=NOW + 19, signalled={"i-1": NOW})
    assert waiting.kills == () and waiting.signals == () and waiting.wake_at == NOW + 20
    p = sync([warned(action=NOW + 120)], now=NOW + 20, signalled={"i-1": NOW})
    (k,) = p.kills
    assert (k.instance_id, k.fail_node, k.spot_warning) == ("i-1", "burst-1", True)
    assert "spot interruption" in k.reason


def test_a_short_window_requeues_before_the_vm_goes_whatever_the_checkpoint_time():
    # GCE gives about 30 s from the report: the requeue is due at 30 - 5 = 25 s, and a
    # checkpoint time of 20 s from a signal sent 10 s in would end at 30 s, too late
    w = warned(WarningKind.PREEMPTION)
    first = sync([w])
    assert first.wake_at == NOW + 20  # min(now + 20, now + 30 - 5)
    late = sync([w], now=NOW + 10, signalled={"i-1": NOW + 10})
    assert late.kills == () and late.wake_at == NOW + 25
    (k,) = sync([w], now=NOW + 25, signalled={"i-1": NOW + 10}).kills
    assert k.fail_node == "burst-1"


def test_a_node_without_jobs_is_ended_at_once():
    p = sync([warned(action=NOW + 120)], busy=False)
    assert p.signals == ()
    assert [k.instance_id for k in p.kills] == ["i-1"]


def test_a_notice_whose_time_has_nearly_come_skips_the_signal():
    p = sync([warned(action=NOW + 4)])  # inside the 5 s margin already
    assert p.signals == () and [k.instance_id for k in p.kills] == ["i-1"]


def test_a_report_from_another_address_is_not_acted_on_and_is_named():
    p = sync([warned(action=NOW + 120, source="10.77.0.99")])
    assert p.signals == () and p.kills == ()
    assert any("10.77.0.99" in w and IP in w for w in p.warnings)


def test_a_rebalance_recommendation_drains_the_node_and_ends_nothing():
    p = sync([warned(WarningKind.REBALANCE)])
    assert p.kills == () and p.signals == ()
    assert [(f.node, f.action) for f in p.nodes] == [("burst-1", "drain")]
    again = sync([warned(WarningKind.REBALANCE)], state=NodeState.DRAINING)
    assert again.nodes == ()  # already out of service: not drained twice


def test_a_stale_slurm_view_signals_nothing_and_ends_the_instance_at_the_last_moment():
    early = sync([warned(action=NOW + 120)], stale=True)
    assert early.signals == () and early.kills == ()
    (k,) = sync([warned(action=NOW + 120)], now=NOW + 115, stale=True).kills
    assert k.fail_node == ""  # Slurm's view is stale: its node is not touched blind


def _listed_again(launched: float, *, first_start: float, node_state=NodeState.ALLOCATED):
    n = node("burst-1", node_state, alloc=8, address=IP)
    return plan_sync(
        SyncInput(
            NOW,
            CTL,
            [record("i-1", S.READY, node="burst-1")],
            [owned("i-1", ip=IP, named="burst-1", launched=launched)],
            True,
            ClusterSnapshot(taken_ts=NOW, nodes=(n,)),
            first_seen={"i-1": NOW - 600},
            first_start={"i-1": first_start},
        )
    )


def test_a_vm_its_group_recreated_under_the_same_name_closes_the_record_and_goes():
    # GCE preempted the VM first listed as started at NOW - 600; its group made another under
    # the same name, started at NOW - 20 (the cloud's own stamps)
    p = _listed_again(NOW - 20, first_start=NOW - 600)
    (k,) = p.kills
    assert (k.instance_id, k.fail_node, k.transition) == ("i-1", "burst-1", True)
    assert "another machine under its name" in k.reason  # its jobs requeue, it ends now


def test_the_same_start_listed_again_is_the_same_machine():
    p = _listed_again(NOW - 600, first_start=NOW - 600)
    assert p.moves == () and p.kills == ()
    near = _listed_again(NOW - 550, first_start=NOW - 600)  # within the 60 s it takes
    assert near.moves == () and near.kills == ()
