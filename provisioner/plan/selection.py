"""Choosing the waiting policy from the site's own past: a portfolio of planner settings, and
the rule that picks one from each candidate's replay of the recent window.

The rule is greedy with hysteresis, not an online-learning algorithm with a regret bound: each
round it takes the cheapest candidate whose replayed average JCT is within `jct_bound` times
`immediate`'s (the fastest any candidate can be), and switches to it only when it has been that
choice on `confirm_rounds` rounds in a row, each time saving more than `margin` of the stakes
(the larger of the policy in force's dollars and immediate's) or the policy in force broke the
bound. Its regret against the best fixed candidate in
hindsight is measured, not bounded (docs/simulator.md, "Choosing the policy from the past").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from provisioner.config.models import Policy, Selection, WaitPolicy
from provisioner.domain.errors import InvalidArgument


@dataclass(frozen=True)
class PolicyCandidate:
    """One planner setting: the kind of policy and what it changes in the default waiting
    policy. `needs`: the runtime knowledge without which it plans exactly as `default` does."""

    name: str
    kind: str  # "default" (the planner) or "budget-timeout" (wait the budget out)
    waiting: tuple[tuple[str, float | bool], ...] = ()
    # "", "unknown" (jobs with no runtime), "learned", "limits", "limits+learned"
    needs: str = ""
    why: str = ""

    def policy(self, base: Policy) -> Policy:
        """The base policy with this candidate's waiting settings, on every job class."""
        if not self.waiting:
            return base
        changes = dict(self.waiting)

        def changed(wp: WaitPolicy) -> WaitPolicy:
            return WaitPolicy.model_validate({**wp.model_dump(), **changes})

        w = base.waiting
        waiting = w.model_copy(
            update={
                "default": changed(w.default),
                "partitions": {k: changed(v) for k, v in w.partitions.items()},
                "qos": {k: changed(v) for k, v in w.qos.items()},
            }
        )
        return base.model_copy(update={"waiting": waiting})

    def applies(self, estimate: str) -> bool:
        """Whether it can plan differently from `default` under a simulator estimate mode."""
        if self.needs == "unknown":
            return estimate in ("none", "history")
        if self.needs == "learned":
            return estimate in ("history", "history+limits")
        if self.needs == "limits":
            return estimate in ("limits", "history+limits")
        if self.needs == "limits+learned":
            return estimate == "history+limits"
        return True


PORTFOLIO: tuple[PolicyCandidate, ...] = (
    PolicyCandidate("default", "default", why="today's policy"),
    PolicyCandidate(
        "per-gpu-1386",
        "default",
        (("per_gpu_s", 1386.0),),
        "unknown",
        "the no-estimate frontier's fast end",
    ),
    PolicyCandidate(
        "per-gpu-2000",
        "default",
        (("per_gpu_s", 2000.0),),
        "unknown",
        "the no-estimate frontier's middle",
    ),
    PolicyCandidate(
        "unsure-floor-4x",
        "default",
        (("learned_floor_spread_ratio", 4.0),),
        "learned",
        "a learned guess spread 4x itself waits the no-estimate budget",
    ),
    PolicyCandidate(
        "unsure-floor-2x",
        "default",
        (("learned_floor_spread_ratio", 2.0),),
        "learned",
        "the same at 2x",
    ),
    PolicyCandidate(
        "learned-floor",
        "default",
        (("learned_floor", True),),
        "learned",
        "every learned guess waits the no-estimate budget: history only ever lengthens a wait",
    ),
    PolicyCandidate(
        "limit-worst-10x",
        "default",
        (("limit_worst_case_ratio", 10.0),),
        "limits+learned",
        "a learned guess 10x below its time limit waits as if it ran to the limit",
    ),
    PolicyCandidate(
        "limit-worst-3000x",
        "default",
        (("limit_worst_case_ratio", 3000.0),),
        "limits+learned",
        "the same for a guess 3000x below its limit only (a 60 s guess under a 2-day limit): "
        "where on-prem is busy, 10x makes every job under a long limit wait past the JCT bound",
    ),
    PolicyCandidate(
        "limit-hedged",
        "default",
        (("hedge_limits", True),),
        "limits",
        "a time limit alone is a guess: the job waits its hedge share before it bursts",
    ),
    PolicyCandidate("budget-timeout", "budget-timeout", why="the budget waited out, no prediction"),
)


def portfolio_for(estimate: str) -> tuple[PolicyCandidate, ...]:
    """The candidates that can differ from `default` under a simulator estimate mode."""
    return tuple(c for c in PORTFOLIO if c.applies(estimate))


def candidate(name: str) -> PolicyCandidate:
    for c in PORTFOLIO:
        if c.name == name:
            return c
    raise InvalidArgument(
        f"unknown portfolio candidate {name!r}: use one of {', '.join(c.name for c in PORTFOLIO)}"
    )


@dataclass(frozen=True)
class WindowScore:
    """A candidate's replay over the recent window: cloud dollars and average JCT."""

    name: str
    cloud_usd: float
    avg_jct_s: float
    jobs: int


@dataclass
class SelectionState:
    incumbent: str = "default"
    challenger: str = ""
    streak: int = 0


@dataclass(frozen=True)
class Choice:
    """One round's outcome: the policy in force after it, and why."""

    at: float
    chosen: str
    switched: bool
    best: str  # this round's cheapest candidate within the bound
    why: str
    scores: tuple[WindowScore, ...] = field(default=(), compare=False)


def select(
    scores: Sequence[WindowScore],
    reference: WindowScore,
    state: SelectionState,
    rule: Selection,
    at: float,
) -> Choice:
    """One round of the rule (see the module doc); updates `state`."""
    by_name = {s.name: s for s in scores}
    inc = by_name.get(state.incumbent)
    if inc is None:
        raise InvalidArgument(f"the policy in force, {state.incumbent!r}, has no replay score")
    bound = rule.jct_bound * reference.avg_jct_s
    eligible = [s for s in scores if s.avg_jct_s <= bound]
    if eligible:
        best = min(eligible, key=lambda s: (s.cloud_usd, s.avg_jct_s))
    else:
        best = min(scores, key=lambda s: (s.avg_jct_s, s.cloud_usd))
    inc_ok = inc.avg_jct_s <= bound
    # A saving counts when it is `margin` of the stakes: the incumbent's dollars, or what
    # bursting everything (immediate) cost over the window, whichever is more. Where little
    # bursts, a few jobs make the whole difference, and a switch on them is noise.
    stakes = max(inc.cloud_usd, reference.cloud_usd)
    better = best.name != inc.name and (
        not inc_ok or inc.cloud_usd - best.cloud_usd > rule.margin * stakes
    )
    figures = (
        f"${best.cloud_usd:,.0f} and JCT {best.avg_jct_s:,.0f} s against "
        f"{inc.name}'s ${inc.cloud_usd:,.0f} and {inc.avg_jct_s:,.0f} s (bound {bound:,.0f} s, "
        f"{rule.jct_bound:g}x immediate's) over {best.jobs} jobs"
    )
    if not better:
        state.challenger, state.streak = "", 0
        why = f"kept {inc.name}: " + (
            f"${inc.cloud_usd:,.0f}, JCT {inc.avg_jct_s:,.0f} s (bound {bound:,.0f} s), "
            "the cheapest within the bound"
            if best.name == inc.name
            else f"{best.name} is {figures}: saves less than {rule.margin:.0%} of ${stakes:,.0f}"
        )
        return Choice(at, inc.name, False, best.name, why, tuple(scores))
    state.streak = state.streak + 1 if state.challenger == best.name else 1
    state.challenger = best.name
    if state.streak < rule.confirm_rounds:
        why = (
            f"kept {inc.name}: {best.name} is {figures}; round {state.streak} of "
            f"{rule.confirm_rounds} before a switch"
        )
        return Choice(at, inc.name, False, best.name, why, tuple(scores))
    why = f"switched {inc.name} -> {best.name}: {figures}, {state.streak} rounds in a row"
    state.incumbent, state.challenger, state.streak = best.name, "", 0
    return Choice(at, best.name, True, best.name, why, tuple(scores))
