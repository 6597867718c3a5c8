"""Choosing the waiting policy from the past: the rule (plan/selection.py) on hand-made
scores, and `--policy adaptive` in the simulator, which must see only the past."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest

from provisioner.config import load_policy
from provisioner.config.models import Selection
from provisioner.domain.errors import InvalidArgument
from provisioner.plan.selection import (
    PORTFOLIO,
    SelectionState,
    WindowScore,
    candidate,
    portfolio_for,
    select,
)
from provisioner.simulate.adaptive import simulate_adaptive
from provisioner.simulate.engine import SimSettings, flat_catalog, simulate
from provisioner.simulate.trace import TraceJob, load_trace

ROOT = Path(__file__).resolve().parents[2]
POLICY = load_policy(ROOT / "policies")
RULE = Selection(jct_bound=1.10, margin=0.05, confirm_rounds=2)
IMM = WindowScore("immediate", 1000.0, 100.0, 50)  # bound: 110 s


def _scores(**figures: tuple[float, float]) -> list[WindowScore]:
    return [WindowScore(name, usd, jct, 50) for name, (usd, jct) in figures.items()]


def test_the_cheapest_within_the_bound_is_adopted_after_two_rounds_in_a_row() -> None:
    state = SelectionState("default")
    # b is cheapest ($500) but its JCT 120 s breaks the 110 s bound; a ($800) is the choice
    scores = _scores(default=(900.0, 105.0), a=(800.0, 108.0), b=(500.0, 120.0))
    first = select(scores, IMM, state, RULE, at=1.0)
    assert (first.chosen, first.best, first.switched) == ("default", "a", False)
    assert "round 1 of 2" in first.why
    second = select(scores, IMM, state, RULE, at=2.0)
    assert (second.chosen, second.switched) == ("a", True)
    assert second.why.startswith("switched default -> a: $800")
    assert state.incumbent == "a"


def test_one_odd_round_does_not_flip_it() -> None:
    state = SelectionState("default")
    cheaper = _scores(default=(900.0, 105.0), a=(800.0, 108.0))
    as_before = _scores(default=(900.0, 105.0), a=(1000.0, 108.0))
    assert not select(cheaper, IMM, state, RULE, at=1.0).switched
    assert not select(as_before, IMM, state, RULE, at=2.0).switched  # the streak is broken
    assert not select(cheaper, IMM, state, RULE, at=3.0).switched  # round 1 again
    assert state.incumbent == "default"


def test_a_challenger_within_the_margin_is_not_worth_a_switch() -> None:
    state = SelectionState("default")
    # $860 saves $40: under 5% of the stakes, max($900, immediate's $1,000) = $50
    scores = _scores(default=(900.0, 105.0), a=(860.0, 100.0))
    for at in range(5):
        c = select(scores, IMM, state, RULE, at=float(at))
        assert not c.switched and c.best == "a"
    assert "saves less than 5% of $1,000" in c.why


def test_where_little_bursts_a_few_dollars_are_no_reason_to_switch() -> None:
    """$60 against $100 is 40% cheaper, but $40 of the $1,000 immediate spent is not 5%:
    where almost nothing bursts, a job or two make the difference (noise)."""
    state = SelectionState("default")
    small = _scores(default=(100.0, 105.0), a=(60.0, 105.0))
    assert not any(select(small, IMM, state, RULE, at=float(t)).switched for t in range(4))
    # $100 against $40 saves $60 > $50: material
    state = SelectionState("default")
    material = _scores(default=(100.0, 105.0), a=(40.0, 105.0))
    assert [select(material, IMM, state, RULE, at=float(t)).switched for t in range(2)] == [
        False,
        True,
    ]


def test_a_policy_in_force_that_breaks_the_bound_is_left_however_cheap() -> None:
    state = SelectionState("default")
    scores = _scores(default=(100.0, 130.0), a=(900.0, 109.0))
    select(scores, IMM, state, RULE, at=1.0)
    assert select(scores, IMM, state, RULE, at=2.0).chosen == "a"


def test_with_none_within_the_bound_the_fastest_is_the_choice() -> None:
    state = SelectionState("default")
    scores = _scores(default=(100.0, 130.0), a=(900.0, 120.0))
    assert select(scores, IMM, state, RULE, at=1.0).best == "a"


def test_an_unscored_policy_in_force_is_an_error() -> None:
    with pytest.raises(InvalidArgument, match="'gone'"):
        select(_scores(a=(1.0, 1.0)), IMM, SelectionState("gone"), RULE, at=0.0)


def test_a_candidate_changes_every_job_class_and_only_what_it_names() -> None:
    base = POLICY.model_copy(
        update={
            "waiting": POLICY.waiting.model_copy(
                update={"qos": {"short": POLICY.waiting.default.model_copy(update={"cap_s": 60.0})}}
            )
        }
    )
    pol = candidate("per-gpu-1386").policy(base)
    assert pol.waiting.default.per_gpu_s == 1386.0
    assert pol.waiting.qos["short"].per_gpu_s == 1386.0
    assert pol.waiting.qos["short"].cap_s == 60.0
    assert pol.waiting.default.runtime_factor == base.waiting.default.runtime_factor
    assert candidate("default").policy(base) is base
    with pytest.raises(InvalidArgument, match="unknown portfolio candidate"):
        candidate("nope")


def test_the_portfolio_names_what_the_issue_asks_for() -> None:
    names = {c.name for c in PORTFOLIO}
    assert {"default", "per-gpu-1386", "per-gpu-2000", "budget-timeout"} <= names
    # with exact runtimes, only the settings that can plan differently are replayed
    assert {c.name for c in portfolio_for("exact")} == {"default", "budget-timeout"}
    ratios = {"limit-worst-10x": 10.0, "limit-worst-3000x": 3000.0}
    assert set(ratios) <= {c.name for c in portfolio_for("history+limits")}
    assert not set(ratios) & {c.name for c in portfolio_for("history") + portfolio_for("limits")}
    for name, ratio in ratios.items():
        assert candidate(name).policy(POLICY).waiting.default.limit_worst_case_ratio == ratio
    # each replayed only where it can plan differently from default
    assert {c.name for c in portfolio_for("limits")} == {
        "default",
        "limit-hedged",
        "budget-timeout",
    }
    assert "learned-floor" in {c.name for c in portfolio_for("history")}
    assert "learned-floor" not in {c.name for c in portfolio_for("none")}
    assert "limit-hedged" not in {c.name for c in portfolio_for("history")}
    assert candidate("learned-floor").policy(POLICY).waiting.default.learned_floor
    assert candidate("limit-hedged").policy(POLICY).waiting.default.hedge_limits


# ---- the simulator -------------------------------------------------------------------------

FAST = POLICY.model_copy(
    update={
        "selection": Selection(interval_s=21_600, window_s=86_400, margin=0.0, confirm_rounds=1)
    }
)


def _slice(days: float) -> list[TraceJob]:
    jobs = load_trace(ROOT / "data/traces/philly_2017-10-02_4w.csv.gz")
    end = jobs[0].submit_s + days * 86_400
    return [j for j in jobs if j.submit_s < end]


def _catalog(jobs: list[TraceJob]):  # type: ignore[no-untyped-def]
    return flat_catalog(Decimal("4.10"), POLICY.onprem.gpu_model, sorted({j.gpus for j in jobs}))


SETTINGS = SimSettings(64, 8, boot_s=0.0, estimate="history", billing_min_s=0.0)


def test_adaptive_with_one_candidate_is_that_candidate() -> None:
    jobs = _slice(2)
    cat = _catalog(jobs)
    a = simulate_adaptive(jobs, SETTINGS, FAST, cat, portfolio=(candidate("default"),))
    fixed = simulate(jobs, SETTINGS, FAST, cat, "default")
    assert a.result.cloud_cost_usd == fixed.cloud_cost_usd
    assert a.result.avg_jct_s == fixed.avg_jct_s
    assert a.candidates[0].cloud_cost_usd == fixed.cloud_cost_usd
    assert len(a.choices) == 7  # rounds every 6 h over 2 days: at 6 h ... 42 h
    assert not any(c.switched for c in a.choices)


def test_adaptive_sees_only_the_past() -> None:
    """Changing every job submitted after t (runtimes, sizes, and a burst of new jobs) changes
    no choice made before t, nor any score it read; and it does change later ones, so the
    test could fail."""
    jobs = _slice(4)
    t = jobs[0].submit_s + 2.5 * 86_400
    changed = [j if j.submit_s < t else replace(j, duration_s=j.duration_s * 3 + 60) for j in jobs]
    changed += [TraceJob(f"new{k}", t + 600.0 * k, 50_000.0, 8) for k in range(40)]
    changed.sort(key=lambda j: (j.submit_s, j.job_id))
    cat = _catalog(changed)
    before = simulate_adaptive(jobs, SETTINGS, FAST, cat)
    after = simulate_adaptive(changed, SETTINGS, FAST, cat)
    early = [c for c in before.choices if c.at <= t]
    assert early == [c for c in after.choices if c.at <= t]
    assert [c.scores for c in early] == [c.scores for c in after.choices if c.at <= t]
    assert any(c.switched for c in early), "no switch before t: the test would prove little"
    late = [(c.chosen, c.scores) for c in before.choices if c.at > t]
    assert late != [(c.chosen, c.scores) for c in after.choices if c.at > t]
