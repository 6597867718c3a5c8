"""The no-regret rule: a job whose runtime is a guess waits its share of the budget before it
bursts. Values worked out by hand from tests/unit/helpers.py: on-prem is 2 nodes x 4 GPUs,
both full; the first node frees at T0 + 3600. Budgets: 600 s per GPU without an estimate,
0.5 x GPUs x runtime with one. hedge_unknown 0.5, hedge_cv 1 (the defaults).
"""

from __future__ import annotations

from provisioner.domain.plan import ReasonCode
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.plan.backoff import Backoff
from provisioner.plan.planner import plan
from tests.unit.helpers import T0, catalog, onprem_nodes, pending, policy, running

BUSY = (running("r1", 4, "onprem-1", ends_in=3600), running("r2", 4, "onprem-2", ends_in=7200))


def _plan(*jobs, nodes=onprem_nodes(2, 4, alloc=4), now=T0, busy=BUSY):
    snap = ClusterSnapshot(taken_ts=now, jobs=(*busy, *jobs), nodes=nodes)
    return plan(snap, policy(), catalog(), Backoff(), now)


def test_no_estimate_waits_half_its_budget_then_bursts() -> None:
    # budget 600 s; predicted start +3600 s lies beyond it; share 0.5 -> burst after 300 s
    p = _plan(pending("a", 1, None))
    (d,) = [d for d in p.decisions if d.job_ids == ("a",)]
    assert d.reason is ReasonCode.WAIT_UNCERTAIN_RUNTIME
    assert d.detail["burst_after_s"] == "300"
    assert d.detail["runtime_source"] == "default"
    assert d.wait_budget_s == 600
    assert not p.scale_ups
    # 299 s after submit it still waits; at 300 s it bursts
    assert not _plan(pending("a", 1, None, submit=T0 - 299)).scale_ups
    (up,) = _plan(pending("a", 1, None, submit=T0 - 300)).scale_ups
    assert up.job_ids == ("a",)
    assert up.decision.reason is ReasonCode.BURST_WAIT_EXCEEDS_BUDGET


def test_steady_history_decides_at_arrival_and_says_where_its_runtime_came_from() -> None:
    # runtime 1000 (no spread): budget 500 < 3600 s: bursts at once
    job = pending("a", 1, 1000, runtime_source="user", runtime_spread_s=0.0)
    (up,) = _plan(job).scale_ups
    assert up.decision.detail["runtime_source"] == "user"
    assert up.decision.detail["runtime_s"] == "1000"


def test_erratic_history_waits_its_spread_share() -> None:
    # cv = 200 / 1000 = 0.2 -> waits 0.2 x 500 = 100 s
    job = pending("a", 1, 1000, runtime_source="group", runtime_spread_s=200.0)
    p = _plan(job)
    (d,) = [d for d in p.decisions if d.job_ids == ("a",)]
    assert d.reason is ReasonCode.WAIT_UNCERTAIN_RUNTIME
    assert d.detail["burst_after_s"] == "100"
    # a single sample has no spread: treated as unknown (share 0.5 -> 250 s)
    one = pending("b", 1, 1000, runtime_source="user")
    (d,) = [d for d in _plan(one).decisions if d.job_ids == ("b",)]
    assert d.detail["burst_after_s"] == "250"


def test_given_estimates_and_time_limits_are_trusted_as_before() -> None:
    assert _plan(pending("a", 1, 1000)).scale_ups  # an estimate given as is
    assert _plan(pending("b", 1, None, time_limit_s=1000)).scale_ups


def test_a_job_that_can_start_now_never_bursts() -> None:
    p = _plan(pending("a", 4, None), nodes=onprem_nodes(2, 4, alloc=0), busy=())
    assert not p.scale_ups
    assert p.predicted_start_ts["a"] == T0


def test_a_job_larger_than_on_prem_is_not_kept_waiting() -> None:
    # 16 GPUs never fit on 8 on-prem GPUs: nothing to wait for
    (up,) = _plan(pending("a", 16, None)).scale_ups
    assert up.job_ids == ("a",)
