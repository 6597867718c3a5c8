"""The controller's policy selection: its window from the jobs table, a round in a process of
its own that no pass waits for, its decision on the feed, and the policy in force read back
from the feed at start. Figures worked out by hand from the records below."""

from __future__ import annotations

import time
from dataclasses import replace
from decimal import Decimal

import pytest

from provisioner.domain.job_records import JobRecord
from provisioner.domain.plan import Decision, ReasonCode
from provisioner.plan.selection import candidate
from provisioner.reconcile.policy_selection import CONTROLLER_PORTFOLIO, PolicySelector
from provisioner.simulate.engine import flat_catalog
from provisioner.simulate.window import replay_window, trace_of
from provisioner.store.memory import MemoryDecisionLog, MemoryJobHistory
from tests.unit.helpers import T0, policy

NOW = T0 + 86_400.0  # the window: [T0, NOW)


class Store(MemoryJobHistory, MemoryDecisionLog):
    def __init__(self) -> None:
        MemoryJobHistory.__init__(self)
        MemoryDecisionLog.__init__(self)


def _rec(job_id: str, gpus: int, submit: float, **kw: object) -> JobRecord:
    state = "completed" if kw.get("end_ts") else ("running" if kw.get("start_ts") else "pending")
    return JobRecord(job_id, submit, state, gpus, account="vision", user="ann",
                     last_seen_ts=NOW - 1, **kw)  # type: ignore[arg-type]  # fmt: skip


RECORDS = [
    _rec("old", 4, T0 - 7200, start_ts=T0 - 7000, end_ts=T0 - 100),  # ended before the window
    _rec("carry", 8, T0 - 3600, start_ts=T0 - 3600, end_ts=T0 + 1800),  # alive at its start
    _rec("done", 4, T0 + 100, eligible_ts=T0 + 200, start_ts=T0 + 300, end_ts=T0 + 900),
    _rec("running", 2, T0 + 1000, start_ts=T0 + 2000),
    _rec("pending", 1, T0 + 5000, time_limit_s=7200.0),
    _rec("pending-no-limit", 1, T0 + 6000),
    _rec("cpu-only", 0, T0 + 7000),
    _rec("too-big", 16, T0 + 8000),  # more than the 8 on-prem GPUs
]


def test_the_window_as_a_trace() -> None:
    jobs = trace_of(RECORDS, T0, NOW, fallback_s=3600.0, most_gpus=8)
    got = [(j.job_id, j.submit_s - T0, j.duration_s, j.gpus) for j in jobs]
    assert got == [
        ("carry", -1.0, 1800.0, 8),  # at the window's start, for what was left of it
        ("done", 200.0, 600.0, 4),  # eligible at +200, ran 600 s
        ("running", 1000.0, 84_400.0, 2),  # has run from +2,000 s to now
        ("pending", 5000.0, 7200.0, 1),  # its time limit
        ("pending-no-limit", 6000.0, 3600.0, 1),  # the fallback runtime
    ]
    assert [j.time_limit_s for j in jobs] == [None, None, None, 7200.0, None]


def test_a_limit_below_what_the_job_ran_is_raised_to_it() -> None:
    """Slurm's grace (OverTimeLimit) lets a job run past its limit."""
    over = _rec("over", 1, T0 + 10, start_ts=T0 + 10, end_ts=T0 + 1010, time_limit_s=900.0)
    (job,) = trace_of([over], T0, NOW, fallback_s=3600.0, most_gpus=8)
    assert (job.duration_s, job.time_limit_s) == (1000.0, 1000.0)


def test_the_replay_tells_each_job_its_own_time_limit() -> None:
    """The limit candidates are measured on the limits the site's users give. Twenty 60 s jobs
    teach the replay that ann's jobs are short; then an 8-GPU job fills on-prem until +42,000 s,
    and at +3,000 s a 4-GPU job under a 30-day limit arrives, which ran 38,000 s. Told only the
    60 s guess, `default` gives it a small budget and bursts it. `limit-worst-10x` sees a limit
    over 10x the guess and gives it the budget of a job that runs to its limit (cap_s, 1 day),
    so it waits for on-prem and bills nothing. Without the limits the two replay alike."""
    short = [_rec(f"s{i}", 1, T0 + 60 * i, start_ts=T0 + 60 * i, end_ts=T0 + 60 * i + 60,
                  time_limit_s=3600.0) for i in range(20)]  # fmt: skip
    hog = _rec("hog", 8, T0 + 2000, start_ts=T0 + 2000, end_ts=T0 + 42_000, time_limit_s=86_400.0)
    long = _rec("long", 4, T0 + 3000, start_ts=T0 + 42_000, end_ts=T0 + 80_000,
                time_limit_s=30 * 86_400.0)  # fmt: skip
    pol = policy()
    cat = flat_catalog(Decimal("3.6"), "A100", [1, 2, 4, 8])
    cands = (candidate("default"), candidate("limit-worst-10x"))

    def dollars(records: list[JobRecord]) -> dict[str, float]:
        r = replay_window(records, T0, NOW, 8, 8, pol, cat, cands)
        return {s.name: s.cloud_usd for s in r.scores}

    told = dollars([*short, hog, long])
    # "long" burst: 4 GPUs x (300 s boot + 38,000 s) x $0.001/GPU-s = $153.20
    assert told["default"] == pytest.approx(153.20)
    assert told["limit-worst-10x"] == 0.0
    blind = dollars([replace(r, time_limit_s=None) for r in (*short, hog, long)])
    assert blind["default"] == blind["limit-worst-10x"] == told["default"]


def _selector(store: Store) -> PolicySelector:
    pol = policy(selection={"interval_s": 3600, "window_s": 86_400})
    cat = flat_catalog(Decimal("3.6"), "A100", [1, 2, 4, 8])  # $0.001 per GPU-second
    return PolicySelector(store, pol, cat, now=NOW - 3600)


def _finish(sel: PolicySelector, now: float) -> Decision:
    """The replay runs in a process of its own: poll the pass's tick with a deadline."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        d = sel.tick(now, onprem_gpus=8, gpus_per_node=8)
        if d is not None:
            return d
        time.sleep(0.05)
    raise AssertionError("no selection round finished in 120 s")


def test_a_round_replays_the_window_off_the_loop_and_logs_why() -> None:
    store = Store()
    store.record_jobs(RECORDS)
    sel = _selector(store)
    try:
        assert sel.tick(NOW - 1, 8, 8) is None and sel._running is None  # not due yet
        t0 = time.monotonic()
        assert sel.tick(NOW, 8, 8) is None  # due: started, and the pass goes on at once
        assert time.monotonic() - t0 < 5 and sel._running is not None
        d = _finish(sel, NOW + 60)
    finally:
        sel.close()
    assert d.reason is ReasonCode.POLICY_SELECTION
    assert d.detail["window_jobs"] == "5"
    # immediate runs a job on-prem if it can start at once, else bursts it on arrival (boot
    # 300 s, billed to now at $0.001/GPU-s). "carry" holds all 8 GPUs until +1,799 s, so
    # "done" (+200) and "running" (+1,000) burst; the two pending jobs start on-prem.
    # Scored: the jobs submitted in the window (not "carry"):
    #   done 4 x (300 + 600) + running 2 x (300 + 84,400) = 3,600 + 169,400 GPU-s = $173.00;
    # JCT cut at now: (900 + 84,700 + 7,200 + 3,600) / 4 = 24,100 s
    assert d.detail["immediate"] == "$173.00, JCT 24,100 s"
    assert {k.removeprefix("candidate ") for k in d.detail if k.startswith("candidate ")} == {
        c.name for c in CONTROLLER_PORTFOLIO
    }
    assert d.detail["chosen"] == "default" and d.detail["switched"] == "no"
    (stored,) = store.decisions(reason="policy_selection")
    assert stored.decision.detail == d.detail
    assert sel.next_round == NOW + 3600


def test_the_policy_in_force_survives_a_restart() -> None:
    store = Store()
    store.record_decisions(
        [
            Decision(
                "policy-selection-1",
                ReasonCode.POLICY_SELECTION,
                detail={"chosen": "per-gpu-2000", "challenger": "default", "streak": "1"},
            )
        ],
        NOW - 600,
    )
    sel = _selector(store)
    assert sel.in_force == "per-gpu-2000"
    assert sel.policy.waiting.default.per_gpu_s == 2000.0
    assert sel.state.challenger == "default" and sel.state.streak == 1
    assert sel.next_round == NOW - 600 + 3600  # an interval after the last round


def test_a_standby_follows_the_rounds_the_leader_logs() -> None:
    store = Store()
    standby = _selector(store)  # started before any round
    assert standby.in_force == "default"
    store.record_decisions(
        [
            Decision(
                "policy-selection-2",
                ReasonCode.POLICY_SELECTION,
                detail={"chosen": "unsure-floor-4x", "challenger": "", "streak": "0"},
            )
        ],
        NOW - 60,
    )
    assert standby.tick(NOW - 30, 8, 8) is None  # not due: the leader's round is 30 s old
    assert standby.in_force == "unsure-floor-4x"
    assert standby.policy.waiting.default.learned_floor_spread_ratio == 4.0
    assert standby.next_round == NOW - 60 + 3600


def test_an_unknown_policy_on_the_feed_falls_back_to_default() -> None:
    store = Store()
    store.record_decisions(
        [Decision("policy-selection-1", ReasonCode.POLICY_SELECTION, detail={"chosen": "gone"})],
        NOW - 600,
    )
    sel = _selector(store)
    assert sel.in_force == "default"
    assert sel.policy.waiting.default.per_gpu_s == 600.0  # the base policy's


def test_the_controller_plans_with_the_policy_in_force_and_shows_it(db_url: str) -> None:
    """A controller started on a store whose feed chose per-gpu-1386 plans with it (a job with
    no runtime waits 1,386 s per GPU, not the base policy's 600) and says so in its status."""
    from datetime import UTC, datetime

    from provisioner.clock import ManualClock
    from provisioner.reconcile.loop import Reconciler, ReconcilerDeps
    from provisioner.store import Store
    from tests.unit.helpers import catalog

    store = Store(db_url)
    try:
        store.record_decisions(
            [
                Decision(
                    "policy-selection-1",
                    ReasonCode.POLICY_SELECTION,
                    detail={"chosen": "per-gpu-1386", "why": "switched default -> per-gpu-1386"},
                )
            ],
            T0 - 600,
        )
        clock = ManualClock(datetime.fromtimestamp(T0, UTC))
        rec = Reconciler(ReconcilerDeps(store, clock, policy(), catalog()))
        assert rec.effective_policy.current().waiting.default.per_gpu_s == 1386.0
        assert rec.effective_policy.current().waiting.partitions["inference"].urgent
        status = rec.status()["waiting_policy"]
        assert status["in_force"] == "per-gpu-1386"
        assert status["last_round_ts"] == T0 - 600
        assert status["why"] == "switched default -> per-gpu-1386"
    finally:
        store.close()
