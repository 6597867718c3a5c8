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


def test_a_policy_may_take_a_time_limit_alone_as_a_guess() -> None:
    """hedge_limits: a job with only a 1,000 s limit is planned with it (budget 0.5 x 1 x
    1,000 = 500 s, start predicted at +3,600 s) but waits half its budget, 250 s, before it
    bursts, as a job with no runtime does. An estimate given as is stays trusted."""
    pol = policy(waiting={"default": {"runtime_factor": 0.5, "hedge_limits": True}})
    job = pending("b", 1, None, time_limit_s=1000)
    snap = ClusterSnapshot(taken_ts=T0, jobs=(*BUSY, job), nodes=onprem_nodes(2, 4, alloc=4))
    p = plan(snap, pol, catalog(), Backoff(), T0)
    assert not p.scale_ups
    (d,) = [d for d in p.decisions if d.job_ids == ("b",)]
    assert d.reason is ReasonCode.WAIT_UNCERTAIN_RUNTIME
    assert d.detail["burst_after_s"] == "250" and d.wait_budget_s == 500
    late = pending("b", 1, None, time_limit_s=1000, submit=T0 - 250)
    snap = ClusterSnapshot(taken_ts=T0, jobs=(*BUSY, late), nodes=onprem_nodes(2, 4, alloc=4))
    (up,) = plan(snap, pol, catalog(), Backoff(), T0).scale_ups
    assert up.job_ids == ("b",)
    given = pending("c", 1, 1000)
    snap = ClusterSnapshot(taken_ts=T0, jobs=(*BUSY, given), nodes=onprem_nodes(2, 4, alloc=4))
    assert plan(snap, pol, catalog(), Backoff(), T0).scale_ups


def test_a_job_that_can_start_now_never_bursts() -> None:
    p = _plan(pending("a", 4, None), nodes=onprem_nodes(2, 4, alloc=0), busy=())
    assert not p.scale_ups
    assert p.predicted_start_ts["a"] == T0


def test_a_job_larger_than_on_prem_is_not_kept_waiting() -> None:
    # 16 GPUs never fit on 8 on-prem GPUs: nothing to wait for
    (up,) = _plan(pending("a", 16, None)).scale_ups
    assert up.job_ids == ("a",)


def _worst_case_policy(ratio: float | None):
    wait = {"runtime_factor": 0.5, "per_gpu_s": 600, "cap_s": 86400}
    if ratio is not None:
        wait["limit_worst_case_ratio"] = ratio
    return policy(waiting={"default": wait})


def _plan_with(pol, *jobs):
    snap = ClusterSnapshot(taken_ts=T0, jobs=(*BUSY, *jobs), nodes=onprem_nodes(2, 4, alloc=4))
    return plan(snap, pol, catalog(), Backoff(), T0)


def test_the_time_limit_is_the_worst_case_of_a_short_learned_guess() -> None:
    """A 4-GPU job its group's history says runs 50 s (no spread), under a 30-day limit.
    Off (the default): budget 0.5 x 4 x 50 = 100 s, far below the 3,600 s wait: it bursts at
    once. On with ratio 10: the limit is 51,840x the guess, so the budget is taken at the
    limit, 0.5 x 4 x 2,592,000 s clamped to cap_s 86,400 s: the 3,600 s wait is within it."""
    job = pending("a", 4, 50, runtime_source="group", runtime_spread_s=0.0,
                  time_limit_s=30 * 86400.0)  # fmt: skip
    (up,) = _plan_with(_worst_case_policy(None), job).scale_ups
    assert up.job_ids == ("a",) and up.decision.wait_budget_s == 100
    p = _plan_with(_worst_case_policy(10), job)
    assert not p.scale_ups
    assert p.predicted_start_ts["a"] == T0 + 3600


def test_the_limit_is_no_worst_case_for_trusted_runtimes_or_near_guesses() -> None:
    pol = _worst_case_policy(10)
    # an estimate given as is: trusted (budget 0.5 x 4 x 50 s): bursts
    given = pending("a", 4, 50, time_limit_s=30 * 86400.0)
    assert _plan_with(pol, given).scale_ups
    # a learned guess of 1,000 s under a 9,000 s limit (9x < 10x): its own budget, 2,000 s
    near = pending("b", 4, 1000, runtime_source="group", runtime_spread_s=0.0,
                   time_limit_s=9000.0)  # fmt: skip
    (up,) = _plan_with(pol, near).scale_ups
    assert up.decision.wait_budget_s == 2000
    # at 10x, 10,000 s: the budget at the limit, 0.5 x 4 x 10,000 = 20,000 s: it waits
    far = pending("c", 4, 1000, runtime_source="group", runtime_spread_s=0.0,
                  time_limit_s=10000.0)  # fmt: skip
    assert not _plan_with(pol, far).scale_ups


def test_at_3000x_only_a_gross_mismatch_takes_the_limit_as_its_worst_case() -> None:
    """`limit-worst-3000x`: a 4-GPU job its group says runs 50 s. Under a 1-day limit (1,728x
    the guess) it keeps its own budget, 0.5 x 4 x 50 = 100 s, and bursts. Under a 2-day limit
    (3,456x) the budget is taken at the limit, 0.5 x 4 x 172,800 s clamped to cap_s 86,400 s,
    and the 3,600 s wait is within it."""
    pol = _worst_case_policy(3000)
    day = pending("a", 4, 50, runtime_source="group", runtime_spread_s=0.0,
                  time_limit_s=86400.0)  # fmt: skip
    (up,) = _plan_with(pol, day).scale_ups
    assert up.decision.wait_budget_s == 100
    two_days = pending("b", 4, 50, runtime_source="group", runtime_spread_s=0.0,
                       time_limit_s=2 * 86400.0)  # fmt: skip
    p = _plan_with(pol, two_days)
    assert not p.scale_ups
    assert p.predicted_start_ts["b"] == T0 + 3600


def _floor_policy(ratio: float | None):
    wait = {"runtime_factor": 0.5, "per_gpu_s": 1000}
    if ratio is not None:
        wait["learned_floor_spread_ratio"] = ratio
    return policy(waiting={"default": wait})


def test_an_unsure_learned_guess_waits_at_least_the_no_estimate_budget() -> None:
    """A 4-GPU job its group says runs 50 s, spread 415 s, 200 s after submit. Off: budget
    0.5 x 4 x 50 = 100 s; it has waited its share (0.5 x 100 s) and the first node frees
    3,800 s after its submit: it bursts. With ratio 4 (415 >= 4 x 50) its budget is the
    no-estimate one, 1,000 x 4 = 4,000 s, and the 3,800 s start is within it: it waits.
    With ratio 10 (415 < 500) the guess is trusted as before."""
    job = pending("a", 4, 50, runtime_source="group", runtime_spread_s=415.0,
                  submit=T0 - 200)  # fmt: skip
    (up,) = _plan_with(_floor_policy(None), job).scale_ups
    assert up.decision.wait_budget_s == 100
    p = _plan_with(_floor_policy(4), job)
    assert not p.scale_ups
    assert p.predicted_start_ts["a"] == T0 + 3600
    (up,) = _plan_with(_floor_policy(10), job).scale_ups
    assert up.decision.wait_budget_s == 100
    # an estimate given as is has no spread to distrust: its own budget
    given = pending("b", 4, 50, submit=T0 - 200)
    (up,) = _plan_with(_floor_policy(4), given).scale_ups
    assert up.decision.wait_budget_s == 100


def test_a_learned_floor_lets_history_lengthen_a_wait_never_shorten_it() -> None:
    """learned_floor: a 4-GPU job its group says runs 50 s with no spread at all (the
    steadiest guess there is), 200 s after submit. Off: budget 0.5 x 4 x 50 = 100 s and it
    bursts. On: at least the no-estimate budget, 1,000 x 4 = 4,000 s, and the first node frees
    3,800 s after its submit: it waits. A guess above the floor keeps its own budget (5,000 s
    runtime: 0.5 x 4 x 5,000 = 10,000 s), and an estimate given as is is no learned guess."""
    floor = policy(waiting={"default": {"runtime_factor": 0.5, "per_gpu_s": 1000,
                                        "learned_floor": True}})  # fmt: skip
    job = pending("a", 4, 50, runtime_source="group", runtime_spread_s=0.0, submit=T0 - 200)
    (up,) = _plan_with(_floor_policy(None), job).scale_ups
    assert up.decision.wait_budget_s == 100
    p = _plan_with(floor, job)
    assert not p.scale_ups
    assert p.predicted_start_ts["a"] == T0 + 3600
    (d,) = [d for d in p.decisions if d.job_ids == ("a",)]
    assert d.wait_budget_s == 4000
    long = pending("b", 4, 5000, runtime_source="user", runtime_spread_s=0.0, submit=T0 - 200)
    (d,) = [d for d in _plan_with(floor, long).decisions if d.job_ids == ("b",)]
    assert d.wait_budget_s == 10_000
    given = pending("c", 4, 50, submit=T0 - 200)
    (up,) = _plan_with(floor, given).scale_ups
    assert up.decision.wait_budget_s == 100
