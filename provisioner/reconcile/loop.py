"""The reconcile loop: one pass observes, syncs, plans, acts, registers and accounts.

```
recover  pending intents a crashed pass left behind (ask the cloud whether the call happened)
observe  Slurm snapshot, the clouds' tagged instances, NVML telemetry from the store
sync     store <-> cloud <-> Slurm (sync.py): adopt, bind, lifecycle steps, sweep
plan     the pure planner, with spend from the store/ledger, back-off, pause and drained pools
act      scale-ups (intent first, offer fallback, back-off), partitions for burst jobs,
         drains (power_down_asap), terminations (intent first)
register boot/stop nodes (same-host stand-in or the demo's cluster), acknowledge Slurm's power
         requests (the observed node states drive the lifecycle)
account  job usage from the snapshot, the accountant's ledger rows
```

Nothing in a pass sleeps or reads the wall clock: time comes from the injected clock, once per
pass. A stale snapshot plans nothing and changes nothing in Slurm; only what the clouds alone
report is synced. Every cloud call is preceded by an intent in the store; `hook(step)` is called
at the points where a crash matters (tests kill the process there) so a restart from the store
and the observed world can be shown to leave no orphan and no duplicate.

This module orchestrates the pass (`Reconciler`) and runs passes on a tick (`ControllerLoop`);
the steps live beside it: `recovery.py` (recover), `snapshot_view.py` (observe, the planner's
view), `actuation.py` (sync applied, act: each plan action through the step for its kind,
`provisioner.act.scale_up`, `provisioner.act.terminate` and the Slurm registrar,
`provisioner.register.registrar`; Slurm-driven power-ups are planned by `plan()`),
`provisioner.register.node_sync` (register),
`accounting_step.py` (account); `context.py` holds what they share (deps, settings, report,
crash steps) and `outcomes.py` the back-off rebuilt from the stored outcomes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from provisioner.account.ledger import Accountant
from provisioner.act.backoff_feed import BackoffSettings
from provisioner.act.node_identity import NameNodeStep
from provisioner.act.ports import OwnedInstance
from provisioner.act.scale_up import ScaleUpStep
from provisioner.act.terminate import TerminateStep
from provisioner.clock import ClockMark, SteadyClock
from provisioner.domain.instances import DEFAULT_STATE_TIMEOUTS_S, InstanceState, join_lease_s
from provisioner.domain.intents import IntentKind
from provisioner.domain.nodes import NodeKind
from provisioner.domain.plan import Decision, Plan, ReasonCode
from provisioner.domain.records import OperatorState, StoredInstance
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.plan.backoff import Backoff
from provisioner.plan.gpu_view import planning_view
from provisioner.plan.planner import plan as make_plan
from provisioner.plan.rank_cache import RankCache
from provisioner.ports.store import FencedOut
from provisioner.reconcile.accounting_step import AccountingStep
from provisioner.reconcile.actuation import PassActuation
from provisioner.reconcile.agent_tokens import revoke_ended
from provisioner.reconcile.context import (
    STEP_DRAIN_AFTER_SLURM,
    STEP_SCALE_UP_AFTER_CLOUD,
    STEP_SCALE_UP_AFTER_INTENT,
    STEP_SCALE_UP_BEFORE_REGISTER,
    STEP_TERMINATE_AFTER_CLOUD,
    STEP_TERMINATE_AFTER_INTENT,
    STEPS,
    Hook,
    LoopConfig,
    PassContext,
    PassReport,
    ReconcilerDeps,
)
from provisioner.reconcile.launch_follow import follow_launches
from provisioner.reconcile.leadership import Leadership
from provisioner.reconcile.listing_memory import ListingMemory
from provisioner.reconcile.outcomes import error_code, rebuild_backoff
from provisioner.reconcile.policy_selection import PolicySelector
from provisioner.reconcile.recovery import recover_intents
from provisioner.reconcile.runtime_learning import RuntimeLearner
from provisioner.reconcile.snapshot_view import EffectivePolicy, enrich, list_owned, observe
from provisioner.reconcile.sync import TERMINABLE, SyncInput, SyncPlan, plan_sync
from provisioner.register.node_sync import NodeSync
from provisioner.register.registrar import SlurmRegistrar

# Names other code imports from here (they moved to the step modules).
__all__ = [
    "STEPS",
    "STEP_DRAIN_AFTER_SLURM",
    "STEP_SCALE_UP_AFTER_CLOUD",
    "STEP_SCALE_UP_AFTER_INTENT",
    "STEP_SCALE_UP_BEFORE_REGISTER",
    "STEP_TERMINATE_AFTER_CLOUD",
    "STEP_TERMINATE_AFTER_INTENT",
    "ControllerLoop",
    "Hook",
    "LoopConfig",
    "PassReport",
    "Reconciler",
    "ReconcilerDeps",
    "error_code",
    "rebuild_backoff",
]

log = logging.getLogger("provisioner.loop")

S = InstanceState

# Decisions that are actions (always recorded); the others are recorded when they change.
_ACTION_REASONS = frozenset(
    {
        ReasonCode.BURST_WAIT_EXCEEDS_BUDGET,
        ReasonCode.BURST_URGENT,
        ReasonCode.SCALE_DOWN_IDLE,
        ReasonCode.TERMINATE_DRAINED,
        ReasonCode.JOIN_TIMEOUT,
    }
)


class Reconciler:
    """One controller's passes. Holds only caches (last snapshot, back-off, usage tracker);
    everything that must survive a restart is in the store or observable."""

    def __init__(self, deps: ReconcilerDeps) -> None:
        self.deps = deps
        self.ctx = PassContext(deps)
        self.store = deps.store
        self.policy = deps.policy
        self.catalog = deps.catalog
        # Offer rankings kept across passes while the catalog and effective policy stay the same.
        self.ranks = RankCache(deps.catalog, deps.policy)
        self.config = deps.config
        self.controller = deps.policy.controller
        self.settings = BackoffSettings.from_guardrails(deps.policy.guardrails)
        self.accountant = Accountant(self.store, self.policy, settle_s=self.config.settle_s)
        self.accounting = AccountingStep(self.store, self.policy, self.accountant)
        self.tracker = self.accounting.tracker
        self.runtimes = RuntimeLearner(self.store)  # learned runtimes, kept in the store
        self._seen: dict[str, tuple[str, ...]] = {}
        self.effective_policy = EffectivePolicy(self.store, self.policy)
        # the waiting policy chosen from the site's own past, replayed off the loop
        self.selector = PolicySelector(self.store, self.policy, self.catalog, self.ctx.now())
        self.effective_policy.adopt(self.selector.policy)
        self.lock = threading.Lock()
        self.passes = 0
        self.last_snapshot: ClusterSnapshot | None = None
        self.last_plan: Plan | None = None
        self.last_report: PassReport | None = None
        self.wake_at: float | None = None  # a step planned for then (the controller's clock)
        # A pass that raised leaves no report: remember when and why, so /v1/status and the
        # metrics show it instead of the last good pass's empty error list.
        self.failed_passes = 0
        self.last_failure: tuple[float, str] | None = None
        self.listings = ListingMemory()  # first/last listed, gone since: the controller's clock
        self._skew_warned: set[tuple[str, str]] = set()
        now = self.ctx.now()
        self.store.sync_pools(self.policy.pools, now)
        self.store.sync_budgets(self.policy.budgets, now)
        since = now - 2 * self.settings.max_s
        self.scale_ups = ScaleUpStep(
            clouds=deps.clouds,
            intents=self.store,
            fence=self.store,
            specs=self.ctx.specs,
            settings=self.settings,
            backoff=rebuild_backoff(
                self.store.intents(kind=IntentKind.SCALE_UP, since_ts=since), self.settings
            ),
            hook=self.ctx.hook,
        )
        self.terminations = TerminateStep(
            clouds=deps.clouds,
            intents=self.store,
            records=self.store,
            fence=self.store,
            terminable=TERMINABLE,
            hook=self.ctx.hook,
        )
        self.slurm = SlurmRegistrar(
            records=self.store,
            node_control=deps.node_control,
            job_control=deps.job_control,
            controller=self.controller,
            hook=self.ctx.hook,
        )
        self.nodes = NodeSync(
            records=self.store, launcher=deps.launcher, power_queue=deps.power_queue
        )
        self.actuation = PassActuation(
            self.ctx,
            self.scale_ups,
            self.terminations,
            self.slurm,
            NameNodeStep(clouds=deps.clouds, fence=self.store),
        )

    @property
    def backoff(self) -> Backoff:
        """The per-offer back-off (the scale-up step replaces it with each scale-up's outcome)."""
        return self.scale_ups.backoff

    @backoff.setter
    def backoff(self, value: Backoff) -> None:
        self.scale_ups.backoff = value

    def _timeouts(self) -> dict[InstanceState, float]:
        t = dict(DEFAULT_STATE_TIMEOUTS_S)
        # The loop handles join failures itself (marking the node failed); the lease is a backstop.
        lease = join_lease_s(self.policy.guardrails.join_timeout_s)
        for st in (S.REQUESTED, S.ALLOCATED, S.JOINING):
            t[st] = max(t[st], lease)
        return t

    # ------------------------------------------------------------------ the pass

    def run_pass(self) -> PassReport:
        with self.lock:
            try:
                return self._run_pass()
            except Exception as exc:
                self.failed_passes += 1
                self.last_failure = (self.ctx.now(), f"{type(exc).__name__}: {exc}"[:500])
                raise

    def _run_pass(self) -> PassReport:
        t0 = time.monotonic()
        # never date a step before the latest stamp any controller wrote (a standby that took
        # over from a host whose clock ran ahead)
        self.ctx.hold_at_least(self.store.latest_clock_ts())
        now = self.ctx.now()
        report = PassReport(now_ts=now)
        recover_intents(self.ctx, self.terminations, now, report)
        snap = observe(self.deps.observer, self.last_snapshot, now)
        report.stale = snap.stale
        listing = list_owned(self.deps.clouds, self.controller, report)
        owned, complete = listing.owned, listing.complete
        listed = {o.instance_id: o for o in owned}
        records = self.ctx.records(now)
        live = (si.instance.instance_id for si in records if not si.instance.state.terminal)
        self.listings.observe(owned, complete, live, now)
        operator = self.store.operator_state()
        splan = plan_sync(self._sync_input(now, records, owned, complete, snap, operator))
        self.wake_at = splan.wake_at
        for w in splan.warnings:
            log.warning("%s", w)
        report.warnings.extend(splan.warnings)
        self._sweep_valve(splan.sweep_hold, operator.sweep_hold_reason, now, report)
        self.actuation.apply_sync(splan, now, snap, report)
        self._spot_warnings(splan, records, now, report)
        self.backoff = follow_launches(self.ctx, self.backoff, self.scale_ups.settings, now, report)
        if splan.kills:
            # A group may launch a replacement as soon as it is told about a reclaimed or
            # terminated member: read the listing again so the plan's budgets count it.
            listing = list_owned(self.deps.clouds, self.controller, PassReport(now_ts=now))
        view = enrich(self.ctx, snap, now, listing)
        self._select_policy(view, now)
        policy = self.effective_policy.current()
        annotated = self.runtimes.annotate(view)
        planned = planning_view(annotated, policy)
        self.ranks = self.ranks.for_inputs(self.catalog, policy)
        plan = make_plan(planned, policy, self.catalog, self.backoff, now, ranks=self.ranks)
        report.decisions = len(plan.decisions)
        report.decisions_recorded = self._record_decisions(plan, now)
        if not view.stale:
            self.actuation.act(plan, view, listed, now, report)
        report.errors.extend(self.nodes.sync(now))
        revoke_ended(self.store, now)  # agent tokens end with their instances
        self.accounting.run(view, now, report, self.listings.gone_since)
        self.accounting.jobs.record(annotated, now)  # with the runtimes predicted for them
        self.runtimes.learn(self.accounting.closed, now)
        self._keep_clocks(now)
        self.last_snapshot = view
        self.last_plan = plan
        self.passes += 1
        report.seconds = time.monotonic() - t0
        self.last_report = report
        return report

    def _sync_input(
        self,
        now: float,
        records: Sequence[StoredInstance],
        owned: Sequence[OwnedInstance],
        complete: bool,
        snap: ClusterSnapshot,
        operator: OperatorState,
    ) -> SyncInput:
        """What passive sync reads this pass: the records, the listing, Slurm's view, and what
        the controller remembers (listings, clocks, spot warnings)."""
        return SyncInput(
            now_ts=now,
            controller=self.controller,
            records=records,
            owned=owned,
            listing_complete=complete,
            snapshot=snap,
            intents=self.store.intents(
                kind=IntentKind.SCALE_UP, since_ts=now - self.config.intent_window_s
            ),
            grace_s=self.config.orphan_grace_s,
            join_timeout_s=self.policy.guardrails.join_timeout_s,
            retry_terminate_s=self.config.retry_terminate_s,
            unbound_timeout_s=self.config.unbound_timeout_s,
            timeouts=self._timeouts(),
            offers=self.ctx.offers_by_type,
            max_disagreements=self.config.sweep_max_disagreements,
            sweep_approved=operator.sweep_approved,
            closed_window_s=self.config.terminal_window_s,
            skew_s=self.ctx.skews.skew_by_cloud(),
            skew_span_s=self.ctx.skews.span_by_cloud(),
            first_seen=self.listings.first_seen,
            first_request_ts=self.store.first_intent_ts(IntentKind.SCALE_UP),
            last_alive=self.listings.last_alive,
            gone_since=self.listings.gone_since,
            first_start=self.listings.first_start,
            set_addresses=self.policy.node.node_address == "instance",
            warnings=self.deps.spot_inbox.held(),
            signalled=self.deps.spot_inbox.signalled(),
            interruptions=self.policy.interruptions,
        )

    def _spot_warnings(
        self, splan: SyncPlan, records: Sequence[StoredInstance], now: float, report: PassReport
    ) -> None:
        """Signal the jobs of nodes warned away; forget the warnings of closed records."""
        inbox = self.deps.spot_inbox
        for iid in self.actuation.apply_signals(splan, report):
            inbox.mark_signalled(iid, now)
        inbox.keep_only(si.instance.instance_id for si in records if not si.instance.state.terminal)

    def _keep_clocks(self, now: float) -> None:
        """Store where the clock stands (a restart on this boot carries on from it; the
        highest mark is every controller's floor) and the clouds' skew; warn of a skew past
        a minute once, when it appears."""
        clock = self.deps.clock
        if isinstance(clock, SteadyClock):
            m = clock.mark()
            mark = ClockMark(m.boot_id, m.mono_s, max(m.ts, now))
        else:
            mark = ClockMark("", 0.0, now)
        self.store.save_clock_mark(mark)
        estimates = self.ctx.skews.estimates()
        self.store.save_cloud_skews(estimates)
        for e in estimates:
            key = (e.cloud, e.account)
            if e.warning and key not in self._skew_warned:
                log.warning(
                    "%s account %s: its clock is %+.1f s (+/- %.1f s) off the controller's; "
                    "its stamps are translated by that and clamped into what the controller saw",
                    e.cloud, e.account, e.skew_s, e.uncertainty_s,
                )  # fmt: skip
                self._skew_warned.add(key)
            elif not e.warning:
                self._skew_warned.discard(key)

    def _sweep_valve(self, hold: str, held_before: str, now: float, report: PassReport) -> None:
        """Record the safety valve's state for the API and metrics; say it in the log."""
        if hold:
            report.sweep_held = hold
            log.warning("orphan sweep held: %s", hold)
        elif held_before:
            log.warning("orphan sweep no longer held")
        if hold != held_before:
            self.store.set_sweep_hold(hold, now)

    def _select_policy(self, view: ClusterSnapshot, now: float) -> None:
        """Start or take a round of policy selection (never waits), and plan with its choice."""
        onprem = [n for n in view.nodes if n.kind is NodeKind.ONPREM]
        per_node = max([n.gpus for n in onprem] or [self.policy.onprem.gpus_per_node])
        self.selector.tick(now, sum(n.gpus for n in onprem), per_node)
        self.effective_policy.adopt(self.selector.policy)

    # ------------------------------------------------------------------ decisions

    def _record_decisions(self, plan: Plan, now: float) -> int:
        """Actions are always recorded; verdicts (wait, blocked, keep) when they change for
        their subject, so an unchanged queue does not write a row per job per pass."""
        keep: list[Decision] = []
        subjects: set[str] = set()
        for d in plan.decisions:
            subject = ",".join(d.job_ids) or d.node or d.instance
            subject = subject or str(d.reason)
            subjects.add(subject)
            sig = (str(d.reason), str(d.chosen or ""), d.detail.get("why", ""))
            if d.reason in _ACTION_REASONS or self._seen.get(subject) != sig:
                keep.append(d)
            self._seen[subject] = sig
        for s in [s for s in self._seen if s not in subjects]:
            del self._seen[s]
        if keep:
            self.store.record_decisions(keep, now)
        return len(keep)

    # ------------------------------------------------------------------ for the API

    def dry_run(self) -> Plan:
        """The plan the controller would make now (nothing is acted on)."""
        now = self.ctx.now()
        snap = self.last_snapshot or ClusterSnapshot(taken_ts=now)
        policy = self.effective_policy.current()
        view = planning_view(snap, policy)
        return make_plan(view, policy, self.catalog, self.backoff, now, ranks=self.ranks)

    def status(self) -> dict[str, Any]:
        r = self.last_report
        out: dict[str, Any] = {"passes": self.passes, "controller": self.controller}
        if r is not None:
            out.update(
                {
                    "last_pass_ts": r.now_ts,
                    "last_pass_seconds": round(r.seconds, 3),
                    "last_pass_stale": r.stale,
                    "last_pass_errors": list(r.errors[:10]),
                    # e.g. a cloud stamp far off what the controller saw, clamped
                    "last_pass_warnings": list(r.warnings[:10]),
                }
            )
        out["failed_passes"] = self.failed_passes
        sel = self.selector
        out["waiting_policy"] = {
            "in_force": sel.in_force,
            "next_round_ts": sel.next_round,
            "last_round_ts": sel.last.created_ts if sel.last is not None else None,
            "why": sel.last.decision.detail.get("why", "") if sel.last is not None else "",
        }
        out["cloud_clocks"] = [
            {
                "cloud": e.cloud,
                "account": e.account,
                "skew_s": round(e.skew_s, 3),
                "uncertainty_s": round(e.uncertainty_s, 3),
                "warning": e.warning,
            }
            for e in self.ctx.skews.estimates()
        ]
        f = self.last_failure
        if f is not None:
            out["last_pass_failure"] = {"at_ts": f[0], "error": f[1]}
            if r is None or f[0] >= r.now_ts:
                out["last_pass_errors"] = [f"pass failed: {f[1]}"]
        out["backoff"] = {
            str(k): {"until_ts": e.until_ts, "failures": e.failures, "code": e.last_code}
            for k, e in self.backoff.entries.items()
        }
        return out


class ControllerLoop:
    """Runs passes every `tick_s` until stopped. A stop request (SIGTERM) lets the current
    pass finish; the wait between passes is an Event wait, so a stop ends it at once. `wake`
    (a burst node's spot warning, posted by the API) starts the next pass at once, and a pass
    that planned a step for a given time (`Reconciler.wake_at`) gets its next pass then.

    With `leadership` (HA: several controllers on one store), a pass runs only while this
    controller holds the lease; otherwise it stands by for the tick. A clean stop releases
    the lease so a standby takes over at once."""

    def __init__(
        self,
        reconciler: Reconciler,
        tick_s: float,
        *,
        on_pass: Callable[[PassReport], None] | None = None,
        before_pass: Callable[[], None] | None = None,
        leadership: Leadership | None = None,
        on_tick: Callable[[], None] | None = None,
    ) -> None:
        self.reconciler = reconciler
        self.on_tick = on_tick  # after every tick, leading or standing by
        self.leadership = leadership
        self.standby_ticks = 0
        self.tick_s = tick_s
        self.on_pass = on_pass
        self.before_pass = before_pass
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.failures = 0

    def request_stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def wake(self) -> None:
        """Run the next pass now, not at the tick."""
        self._wake.set()

    def _wait_s(self, started: float) -> float:
        wait = self.tick_s - (time.monotonic() - started)
        due = self.reconciler.wake_at
        if due is not None:
            wait = min(wait, due - self.reconciler.ctx.now())
        return max(0.0, wait)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self, max_passes: int | None = None) -> int:
        n = 0
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                if self.leadership is not None and not self.leadership.ensure():
                    self.standby_ticks += 1
                    report = None
                else:
                    if self.before_pass is not None:
                        self.before_pass()
                    report = self.reconciler.run_pass()
            except FencedOut as exc:  # it lost the lease mid-pass: what it tried was refused
                self.failures += 1
                log.warning("pass stopped by fencing: %s", exc)
            except Exception as exc:  # a bug or a store outage: log it, keep the controller up
                self.failures += 1
                log.error("reconcile pass failed: %s: %s", type(exc).__name__, exc)
                log.debug("reconcile pass failure", exc_info=True)
            else:
                if report is not None and self.on_pass is not None:
                    self.on_pass(report)
            if self.on_tick is not None:
                self.on_tick()
            n += 1
            if max_passes is not None and n >= max_passes:
                break
            self._wake.wait(self._wait_s(t0))
            self._wake.clear()
        if self.leadership is not None:
            self.leadership.release()
        return n
