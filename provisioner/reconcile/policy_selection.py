"""The waiting policy chosen from the site's own past, off the reconcile loop.

Every `selection.interval_s` the controller reads its recent window from the jobs table and
replays it once per portfolio candidate and once under `immediate`, in a process of its own
(simulate/window.py), against the live catalog and the on-prem GPUs it counts now. A pass
never waits for it: it starts a round when one is due and none runs (a thread of its own
reads the window from the store and waits for the worker), and takes a round's result in the
first pass after it finished. The rule (plan/selection.py) then keeps or
switches the policy in force; every round is a decision on the feed (`policy_selection`), with
its figures and why, and the policy in force is read back from the newest one at start, so a
restart or a standby taking over goes on with it.

The controller's portfolio holds the candidates the planner can run: `budget-timeout` is a
simulator baseline with no planner mode, so only the simulator replays it.
"""

from __future__ import annotations

import logging
import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Protocol

from provisioner.config.models import Policy
from provisioner.domain.errors import InvalidArgument
from provisioner.domain.job_records import JobRecord
from provisioner.domain.plan import Decision, ReasonCode
from provisioner.domain.records import StoredDecision
from provisioner.plan.catalog import Catalog
from provisioner.plan.selection import PORTFOLIO, Choice, SelectionState, candidate, select
from provisioner.simulate.window import WindowReplay, replay_window

log = logging.getLogger("provisioner.selection")

CONTROLLER_PORTFOLIO = tuple(c for c in PORTFOLIO if c.kind == "default")


class SelectionStore(Protocol):
    def job_records(
        self, *, since: float | None = None, until: float | None = None
    ) -> list[JobRecord]: ...

    def decisions(self, *, reason: str | None = None, limit: int = 100) -> list[StoredDecision]: ...

    def record_decisions(self, decisions: list[Decision], created_ts: float) -> int: ...


class PolicySelector:
    def __init__(self, store: SelectionStore, base: Policy, catalog: Catalog, now: float) -> None:
        self.store = store
        self.base = base
        self.catalog = catalog
        self.rule = base.selection
        self.state = SelectionState("default")
        self.last: StoredDecision | None = None
        self.next_round = now + self.rule.interval_s
        self.policy = base
        self._running: Future[WindowReplay] | None = None
        self._pool: ProcessPoolExecutor | None = None
        self._reader: ThreadPoolExecutor | None = None
        self._follow_feed()

    def _follow_feed(self) -> None:
        """The policy in force, and a challenger's streak, from the newest round on the feed,
        when it is newer than the last this process knew: at start, and when another
        controller (the leader before a failover) ran one."""
        newest = self.store.decisions(reason=ReasonCode.POLICY_SELECTION.value, limit=1)
        if not newest or (self.last is not None and newest[0].created_ts <= self.last.created_ts):
            return
        self.last = newest[0]
        d = newest[0].decision
        self.state = SelectionState(
            incumbent=d.detail.get("chosen", "default"),
            challenger=d.detail.get("challenger", ""),
            streak=int(d.detail.get("streak", "0") or 0),
        )
        self.policy = self._policy_of(self.state.incumbent)
        self.next_round = self.last.created_ts + self.rule.interval_s

    def _policy_of(self, name: str) -> Policy:
        try:
            return candidate(name).policy(self.base)
        except InvalidArgument:
            log.warning("policy selection: %r is no candidate any more; back to default", name)
            self.state = SelectionState("default")
            return self.base

    @property
    def in_force(self) -> str:
        return self.state.incumbent

    def tick(self, now: float, onprem_gpus: int, gpus_per_node: int) -> Decision | None:
        """Once per pass, never waiting: start a due round, or take a finished one's result
        (its decision, recorded here, is returned)."""
        if self._running is not None:
            if not self._running.done():
                return None
            running, self._running = self._running, None
            try:
                replay = running.result()
            except Exception as exc:  # a failed replay keeps the policy in force
                log.warning("policy selection: the replay failed: %s: %s", type(exc).__name__, exc)
                return None
            return self._adopt(replay)
        self._follow_feed()
        if now < self.next_round or onprem_gpus <= 0:
            return None
        if self._pool is None:
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
            self._reader = ThreadPoolExecutor(1, thread_name_prefix="policy-selection")
        assert self._reader is not None
        self._running = self._reader.submit(self._round, now, onprem_gpus, gpus_per_node)
        self.next_round = now + self.rule.interval_s
        return None

    def _round(self, now: float, onprem_gpus: int, gpus_per_node: int) -> WindowReplay:
        """In the selection thread: read the window (thousands of rows: not on the pass's
        time), then wait for its replay in the worker process."""
        assert self._pool is not None
        since = now - self.rule.window_s
        records = self.store.job_records(since=since, until=now)
        return self._pool.submit(
            replay_window,
            records,
            since,
            now,
            onprem_gpus,
            gpus_per_node,
            self.base,
            self.catalog,
            CONTROLLER_PORTFOLIO,
        ).result()

    def _adopt(self, replay: WindowReplay) -> Decision:
        choice = select(replay.scores, replay.reference, self.state, self.rule, replay.now)
        if choice.switched:
            self.policy = self._policy_of(choice.chosen)
            log.info("policy selection: %s", choice.why)
        decision = _decision(choice, replay, self.state)
        self.store.record_decisions([decision], replay.now)
        self.last = StoredDecision(decision, replay.now, reason=decision.reason.value)
        return decision

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        if self._reader is not None:
            self._reader.shutdown(wait=False, cancel_futures=True)
            self._reader = None


def _decision(choice: Choice, replay: WindowReplay, state: SelectionState) -> Decision:
    detail = {
        "chosen": choice.chosen,
        "switched": "yes" if choice.switched else "no",
        "best": choice.best,
        "why": choice.why,
        "challenger": state.challenger,
        "streak": str(state.streak),
        "window_s": f"{replay.now - replay.since:.0f}",
        "window_jobs": str(replay.jobs),
        "replay_cpu_s": f"{replay.seconds:.2f}",
        "immediate": f"${replay.reference.cloud_usd:,.2f}, JCT {replay.reference.avg_jct_s:,.0f} s",
    }
    for s in replay.scores:
        detail[f"candidate {s.name}"] = f"${s.cloud_usd:,.2f}, JCT {s.avg_jct_s:,.0f} s"
    return Decision(
        decision_id=f"policy-selection-{replay.now:.0f}",
        reason=ReasonCode.POLICY_SELECTION,
        detail=detail,
    )
