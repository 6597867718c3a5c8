"""Wait prediction on the availability profile, checked by hand."""

from __future__ import annotations

import math

from provisioner.plan.profile import OnPremProfile, Placement


def test_idle_cluster_starts_at_once_first_fit() -> None:
    prof = OnPremProfile.idle(nodes=2, gpus_per_node=4, now_ts=0.0)
    p = prof.earliest(2, 0.0, 100.0)
    assert p == Placement(0.0, (0,), (2,))
    prof.commit(p, 100.0)
    # node 0 still has 2 GPUs: first fit keeps using it
    assert prof.earliest(2, 0.0, 50.0) == Placement(0.0, (0,), (2,))
    assert prof.earliest(3, 0.0, 50.0) == Placement(0.0, (1,), (3,))


def test_full_cluster_predicts_the_first_release() -> None:
    prof = OnPremProfile.idle(2, 4, 0.0)
    prof.commit(Placement(0.0, (0,), (4,)), 300.0)
    prof.commit(Placement(0.0, (1,), (4,)), 100.0)
    assert prof.earliest(4, 0.0, 10.0) == Placement(100.0, (1,), (4,))
    assert prof.earliest(1, 0.0, 10.0) == Placement(100.0, (1,), (1,))


def test_conservative_backfill_uses_a_hole_without_moving_a_reservation() -> None:
    prof = OnPremProfile.idle(1, 4, 0.0)
    prof.commit(Placement(0.0, (0,), (2,)), 100.0)  # 2 GPUs busy until 100
    big = prof.earliest(4, 0.0, 1000.0)
    assert big == Placement(100.0, (0,), (4,))  # the whole node from 100
    prof.commit(big, 1100.0)
    # a short 2-GPU job fits in the hole before the reservation...
    assert prof.earliest(2, 0.0, 100.0) == Placement(0.0, (0,), (2,))
    # ...a long one does not: it waits for the big job to finish
    assert prof.earliest(2, 0.0, 101.0) == Placement(1100.0, (0,), (2,))


def test_multi_node_job_takes_whole_nodes_plus_a_remainder() -> None:
    prof = OnPremProfile.idle(3, 4, 0.0)
    prof.commit(Placement(0.0, (0,), (1,)), 500.0)
    p = prof.earliest(6, 0.0, 60.0)
    # node 0 is not whole: one whole node (1) and the remainder of 2 on node 0 (first fit)
    assert p is not None and p.start_ts == 0.0
    assert sorted(zip(p.nodes, p.gpus_each, strict=True)) == [(0, 2), (1, 4)]
    assert prof.earliest(13, 0.0, 60.0) is None  # more than the cluster holds


def test_unusable_node_never_fits() -> None:
    prof = OnPremProfile([0, 4], 0.0, 4)
    assert prof.earliest(4, 0.0, 1.0) == Placement(0.0, (1,), (4,))
    prof.commit(Placement(0.0, (1,), (4,)), math.inf)
    assert prof.earliest(1, 0.0, 1.0) is None


def test_retime_frees_gpus_when_a_job_ends_early() -> None:
    prof = OnPremProfile.idle(1, 4, 0.0)
    p = Placement(0.0, (0,), (4,))
    prof.commit(p, 1000.0)
    assert prof.earliest(1, 0.0, 10.0) == Placement(1000.0, (0,), (1,))
    prof.retime(p, 1000.0, 200.0)
    assert prof.earliest(1, 0.0, 10.0) == Placement(200.0, (0,), (1,))


def test_a_reservation_cut_before_its_start_gives_back_only_what_it_held() -> None:
    # A job reserved for [500, 1000) that leaves the queue at 200 (it burst before its start)
    # frees nothing before 500: the node keeps one job's worth of GPUs at every moment.
    prof = OnPremProfile.idle(1, 4, 0.0)
    prof.commit(Placement(0.0, (0,), (4,)), 500.0)
    later = Placement(500.0, (0,), (4,))
    prof.commit(later, 1000.0)
    prof.retime(later, 1000.0, 200.0)
    assert prof.earliest(1, 0.0, 10.0) == Placement(500.0, (0,), (1,))
    assert prof.earliest(4, 0.0, 10.0) == Placement(500.0, (0,), (4,))
    assert max(max(f) for f in prof.free) <= 4
    assert prof.earliest(5, 0.0, 10.0) is None


def test_copy_is_independent() -> None:
    prof = OnPremProfile.idle(1, 4, 0.0)
    twin = prof.copy()
    twin.commit(Placement(0.0, (0,), (4,)), 100.0)
    assert prof.earliest(4, 0.0, 1.0) == Placement(0.0, (0,), (4,))
    assert twin.earliest(4, 0.0, 1.0) == Placement(100.0, (0,), (4,))


def test_a_tie_on_start_goes_to_the_lowest_node_whatever_was_asked_before() -> None:
    # Two 1-GPU nodes. Node 0: free until 10, busy 10-100. Node 1: busy 0-50, free 50-60,
    # busy 60-100. A 30 s job from t=20 starts at 100 on either (node 1's gap is too short):
    # the tie goes to node 0. One profile is asked a question before the steps before t=20
    # are trimmed, the other only after; both must answer node 0.
    def build() -> OnPremProfile:
        p = OnPremProfile([1, 1], 0.0, 1)
        p.adjust(0, 10.0, 100.0, -1)
        p.adjust(1, 0.0, 50.0, -1)
        p.adjust(1, 60.0, 100.0, -1)
        return p

    asked, quiet = build(), build()
    asked.earliest(1, 0.0, 5.0)
    for p in (asked, quiet):
        p.forget_before(20.0)
        assert p.earliest(1, 20.0, 30.0) == Placement(100.0, (0,), (1,))
