"""`--policy adaptive`: the policy chosen from the past as the trace replays.

Each portfolio candidate (plan/selection.py) and `immediate` replay the trace side by side, in
lockstep with the adaptive run itself. Every `selection.interval_s` of trace time, before the
arrivals of that moment are decided, each candidate's replay is scored over the last
`selection.window_s` (the jobs submitted then: dollars billed by now, JCT cut at now), and the
rule picks the policy the adaptive run decides by from then on. Only the past reaches a choice:
the replays have decided only jobs submitted before the moment, and a score reads nothing after
it.

This is the controller's selection with the replays kept running, rather than started afresh
from the jobs table each round: the same candidates, window, score and rule, and each replay
carries its cluster's state into the window instead of starting it empty.

Simplified: a job whose fate the engine settles at its arrival (it waits its budget out, then
bursts) keeps that fate after a switch; a controller would apply the new policy from the next
pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from provisioner.config.models import Policy, Selection
from provisioner.plan.catalog import Catalog
from provisioner.plan.selection import (
    Choice,
    PolicyCandidate,
    SelectionState,
    WindowScore,
    portfolio_for,
    select,
)
from provisioner.simulate.engine import SimResult, SimSettings, Simulation
from provisioner.simulate.trace import TraceJob


@dataclass
class AdaptiveResult:
    result: SimResult  # the adaptive run's own
    candidates: list[SimResult]  # each candidate's replay over the whole trace
    immediate: SimResult
    choices: list[Choice]
    origin: float = 0.0  # the first arrival, for days since the start

    def best_fixed(self, jct_bound: float) -> SimResult:
        """The cheapest candidate over the whole trace whose average JCT is within `jct_bound`
        times immediate's (the lowest-JCT one if none is): the best fixed choice in hindsight."""
        bound = jct_bound * self.immediate.avg_jct_s
        ok = [r for r in self.candidates if r.avg_jct_s <= bound]
        if ok:
            return min(ok, key=lambda r: (r.cloud_cost_usd, r.avg_jct_s))
        return min(self.candidates, key=lambda r: (r.avg_jct_s, r.cloud_cost_usd))

    def to_dict(self, jct_bound: float) -> dict[str, object]:
        best = self.best_fixed(jct_bound)
        return {
            **self.result.to_dict(),
            "best_fixed": best.policy,
            "best_fixed_cloud_cost_usd": float(round(best.cloud_cost_usd, 2)),
            "regret_vs_best_fixed_usd": float(
                round(self.result.cloud_cost_usd - best.cloud_cost_usd, 2)
            ),
            "choices": [
                {
                    "day": round((c.at - self.origin) / 86400, 2),
                    "chosen": c.chosen,
                    "why": c.why,
                }
                for c in self.choices
                if c.switched
            ],
            "rounds": len(self.choices),
            "candidates": [r.to_dict() for r in self.candidates],
        }


def simulate_adaptive(
    jobs: Sequence[TraceJob],
    settings: SimSettings,
    policy: Policy,
    catalog: Catalog,
    tick: Callable[[int], None] | None = None,
    portfolio: Sequence[PolicyCandidate] | None = None,
) -> AdaptiveResult:
    t0 = time.perf_counter()
    cands = tuple(portfolio) if portfolio is not None else portfolio_for(settings.estimate)
    policies = {c.name: c.policy(policy) for c in cands}
    worlds = {c.name: Simulation(jobs, settings, policies[c.name], catalog, c.kind) for c in cands}
    for name, w in worlds.items():
        w.name = name
    reference = Simulation(jobs, settings, policy, catalog, "immediate")
    first = cands[0]
    me = Simulation(jobs, settings, policies[first.name], catalog, first.kind)
    me.name = "adaptive"
    kinds = {c.name: c.kind for c in cands}
    rule = policy.selection
    state = SelectionState(incumbent=first.name)
    choices: list[Choice] = []
    n = len(jobs)
    next_round = jobs[0].submit_s + rule.interval_s if n else 0.0
    i = 0
    while i < n:
        now = jobs[i].submit_s
        if now >= next_round:
            choice = _round(worlds, reference, state, rule, now)
            choices.append(choice)
            if choice.switched:
                me.adopt(policies[choice.chosen], kinds[choice.chosen])
            while next_round <= now:
                next_round += rule.interval_s
        j = me.step(i)
        for w in (*worlds.values(), reference):
            w.step(i)
        if tick is not None:
            tick(j - i)
        i = j
    wall = time.perf_counter() - t0
    return AdaptiveResult(
        result=me.result(wall),
        candidates=[w.result(0.0) for w in worlds.values()],
        immediate=reference.result(0.0),
        choices=choices,
        origin=jobs[0].submit_s if n else 0.0,
    )


def _round(
    worlds: dict[str, Simulation],
    reference: Simulation,
    state: SelectionState,
    rule: Selection,
    now: float,
) -> Choice:
    since = now - rule.window_s
    scores = [WindowScore(name, *w.window_score(since, now)) for name, w in worlds.items()]
    ref = WindowScore("immediate", *reference.window_score(since, now))
    return select(scores, ref, state, rule, now)
