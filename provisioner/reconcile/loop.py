"""The reconcile loop: one pass observes, syncs, plans, acts, registers and accounts.

```
recover  pending intents a crashed pass left behind (ask the cloud whether the call happened)
observe  Slurm snapshot, the clouds' tagged instances, NVML telemetry from the store
sync     store <-> cloud <-> Slurm (sync.py): adopt, bind, lifecycle steps, sweep
plan     the pure planner, with spend from the store/ledger, back-off, pause and drained pools
act      scale-ups (intent first, offer fallback, back-off), partitions for burst jobs,
         drains (power_down_asap), terminations (intent first)
register boot/stop nodes (local launcher or the demo's cluster), acknowledge Slurm's power
         requests (the observed node states drive the lifecycle)
account  job usage from the snapshot, the accountant's ledger rows
```

Nothing in a pass sleeps or reads the wall clock: time comes from the injected clock, once per
pass. A stale snapshot plans nothing and changes nothing in Slurm; only what the clouds alone
report is synced. Every cloud call is preceded by an intent in the store; `hook(step)` is called
at the points where a crash matters (tests kill the process there) so a restart from the store
and the observed world can be shown to leave no orphan and no duplicate.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from provisioner.account.budgets import budget_status
from provisioner.account.energy import bill_energy
from provisioner.account.ledger import Accountant, AccountingResult
from provisioner.act.actuator import CloudPorts, scale_up_with_fallback, terminate_instance
from provisioner.act.backoff_feed import BackoffSettings
from provisioner.act.ports import CloudState, OwnedInstance, PoolSpec, request_token
from provisioner.act.specs import NodeImages, UserDataFn, pool_capacities, spec_for_offer
from provisioner.clock import Clock
from provisioner.config.models import Policy, PoolPolicy
from provisioner.domain.errors import (
    AuthError,
    CapacityError,
    CloudError,
    NotFoundError,
    ProvisionerError,
    QuotaError,
    ThrottlingError,
    TransientError,
)
from provisioner.domain.instances import DEFAULT_STATE_TIMEOUTS_S, CloudInstance, InstanceState
from provisioner.domain.nodes import NodeKind, NodeState
from provisioner.domain.offers import Offer, OfferKey
from provisioner.domain.plan import (
    Alternative,
    Decision,
    Drain,
    Plan,
    ReasonCode,
    ScaleUp,
    decision_id,
)
from provisioner.domain.snapshot import ClusterSnapshot, SpendState
from provisioner.observe.gpu_load import attach_gpu_load, gpu_load_from_store, planning_view
from provisioner.observe.slurm import SlurmObserver, observe_or_stale
from provisioner.observe.slurm_usage import UsageRecord, UsageTracker
from provisioner.plan.backoff import Backoff
from provisioner.plan.catalog import Catalog
from provisioner.plan.matching import offer_fits
from provisioner.plan.planner import plan as make_plan
from provisioner.plan.ranking import Candidate, candidates_for, pool_request, rank
from provisioner.reconcile.ports import JobControl, NodeControl, NodeLauncher
from provisioner.reconcile.store import Intent, JobUsage, Store, StoredInstance
from provisioner.reconcile.sync import (
    Kill,
    SyncInput,
    SyncPlan,
    owned_from_record,
    plan_adoptions,
    plan_sync,
)
from provisioner.register.handoff import process_power_requests
from provisioner.register.power_queue import PowerRequestQueue

log = logging.getLogger("provisioner.loop")

S = InstanceState

# Where a crash matters; `hook(step)` is called at each (tests raise or SIGKILL there).
STEP_SCALE_UP_AFTER_INTENT = "scale_up.after_intent"
STEP_SCALE_UP_AFTER_CLOUD = "scale_up.after_cloud"
STEP_SCALE_UP_BEFORE_REGISTER = "scale_up.before_register"
STEP_DRAIN_AFTER_SLURM = "scale_down.during_drain"
STEP_TERMINATE_AFTER_INTENT = "terminate.after_intent"
STEP_TERMINATE_AFTER_CLOUD = "terminate.after_cloud"
STEPS = (
    STEP_SCALE_UP_AFTER_INTENT,
    STEP_SCALE_UP_AFTER_CLOUD,
    STEP_SCALE_UP_BEFORE_REGISTER,
    STEP_DRAIN_AFTER_SLURM,
    STEP_TERMINATE_AFTER_INTENT,
    STEP_TERMINATE_AFTER_CLOUD,
)

Hook = Callable[[str], None]

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
_IN_FLIGHT = (S.REQUESTED, S.ALLOCATED, S.JOINING)


_CATEGORIES: tuple[tuple[type[CloudError], str], ...] = (
    (CapacityError, "capacity"),
    (QuotaError, "quota"),
    (ThrottlingError, "throttling"),
    (TransientError, "transient"),
    (AuthError, "auth"),
    (NotFoundError, "not_found"),
)


def error_code(err: CloudError) -> str:
    """A structured code for a failed cloud call: `<category>:<cloud code>` (the category is
    the taxonomy class, so the back-off can be rebuilt from stored intents)."""
    category = next((name for cls, name in _CATEGORIES if isinstance(err, cls)), "error")
    return f"{category}:{err.code or type(err).__name__}"[:64]


def _backs_off(code: str) -> bool:
    return code.split(":", 1)[0] in ("capacity", "quota")


def rebuild_backoff(intents: Iterable[Intent], settings: BackoffSettings) -> Backoff:
    """The per-offer back-off as the stored scale-up outcomes imply it (after a restart)."""
    b = Backoff()
    events: list[tuple[float, str, Intent]] = []
    for it in intents:
        if it.kind != "scale_up" or not it.offer or it.completed_ts is None:
            continue
        events.append((it.completed_ts, it.token, it))
    for ts, _, it in sorted(events, key=lambda e: (e[0], e[1])):
        key = OfferKey.parse(it.offer)
        short = str(it.result.get("shortfall_code", "")) if it.status == "confirmed" else ""
        code = it.error_code if it.status == "failed" else short
        if code and _backs_off(code):
            b = b.record_failure(key, ts, settings.initial_s, settings.max_s, code)
        elif it.status == "confirmed":
            b = b.record_success(key)
    return b


@dataclass(frozen=True, slots=True)
class LoopConfig:
    orphan_grace_s: float = 120.0  # must exceed one tick
    retry_terminate_s: float = 120.0
    unbound_timeout_s: float = 600.0  # an instance Slurm asked no node for is let go
    # Slurm-driven: a CLOUD node Slurm powers up on its own (a job submitted straight to a burst
    # partition, or placed on another node than the one in flight) gets an instance.
    serve_slurm_power_ups: bool = True
    telemetry_max_age_s: float = 300.0
    settle_s: float = 0.0  # accountant: bill live instances up to now - settle_s
    intent_window_s: float = 3600.0  # scale-up intents read back for adoption
    placeholder_s: float = 600.0  # launched-but-not-yet-listed capacity counts this long
    terminal_window_s: float = 86_400.0  # closed records kept in view for the sweep


@dataclass
class ReconcilerDeps:
    store: Store
    clock: Clock
    policy: Policy
    catalog: Catalog
    observer: SlurmObserver | None = None
    node_control: NodeControl | None = None
    job_control: JobControl | None = None
    clouds: Mapping[str, CloudPorts] = field(default_factory=dict)
    images: NodeImages = field(default_factory=NodeImages)
    user_data: UserDataFn | None = None
    gcp_project: str = ""
    launcher: NodeLauncher | None = None
    power_queue: PowerRequestQueue | None = None
    hook: Hook | None = None
    config: LoopConfig = field(default_factory=LoopConfig)


@dataclass
class PassReport:
    now_ts: float
    stale: bool = False
    decisions: int = 0
    decisions_recorded: int = 0
    scale_ups: int = 0
    nodes_requested: int = 0
    nodes_placed: int = 0
    adopted: int = 0
    drained: int = 0
    terminated: int = 0
    jobs_moved: int = 0
    ledger_rows: int = 0
    ledger_usd: Decimal = Decimal(0)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0


class _AckHandler:
    """Controller-driven mode: Slurm's power requests are acknowledged; the node states the
    snapshot shows (powering up, powered down, down) drive the lifecycle instead."""

    def resume(self, nodes: Sequence[str]) -> None:
        log.debug("slurm resume request for %s (bound from the snapshot)", nodes)

    def suspend(self, nodes: Sequence[str]) -> None:
        log.debug("slurm suspend request for %s (terminated from the snapshot)", nodes)

    def resume_failed(self, nodes: Sequence[str]) -> None:
        log.info("slurm reports %s did not resume in time", nodes)


class Reconciler:
    """One controller's passes. Holds only caches (last snapshot, back-off, usage tracker);
    everything that must survive a restart is in the store or observable."""

    def __init__(self, deps: ReconcilerDeps) -> None:
        self.deps = deps
        self.store = deps.store
        self.policy = deps.policy
        self.catalog = deps.catalog
        self.config = deps.config
        self.controller = deps.policy.controller
        self.settings = BackoffSettings.from_guardrails(deps.policy.guardrails)
        self.accountant = Accountant(self.store, self.policy, settle_s=self.config.settle_s)
        self.tracker = UsageTracker()
        self._usage_written: dict[tuple[str, str, float], float | None] = {}
        self._offers: dict[tuple[str, str, str], Offer] = {
            (o.cloud, o.region, o.instance_type): o for o in self.catalog
        }
        self._seen: dict[str, tuple[str, ...]] = {}
        self._drained_policy: tuple[frozenset[str], Policy] | None = None
        self._owned: dict[str, OwnedInstance] = {}
        self.lock = threading.Lock()
        self.passes = 0
        self.last_snapshot: ClusterSnapshot | None = None
        self.last_plan: Plan | None = None
        self.last_report: PassReport | None = None
        now = self._now()
        self.store.sync_pools(self.policy.pools, now)
        self.store.sync_budgets(self.policy.budgets, now)
        since = now - 2 * self.settings.max_s
        self.backoff = rebuild_backoff(
            self.store.intents(kind="scale_up", since_ts=since), self.settings
        )

    # ------------------------------------------------------------------ helpers

    def _now(self) -> float:
        return self.deps.clock.now().timestamp()

    def _hook(self, step: str) -> None:
        if self.deps.hook is not None:
            self.deps.hook(step)

    def _timeouts(self) -> dict[InstanceState, float]:
        t = dict(DEFAULT_STATE_TIMEOUTS_S)
        # The loop handles join failures itself (marking the node failed); the lease is a backstop.
        lease = 2 * self.policy.guardrails.join_timeout_s
        for st in (S.REQUESTED, S.ALLOCATED, S.JOINING):
            t[st] = max(t[st], lease)
        return t

    def _records(self, now: float) -> list[StoredInstance]:
        keep = now - self.config.terminal_window_s
        return [
            si
            for si in self.store.instances()
            if not si.instance.state.terminal or (si.ended_ts or now) >= keep
        ]

    def _list_owned(self, report: PassReport) -> tuple[list[OwnedInstance], bool]:
        owned: list[OwnedInstance] = []
        complete = True
        for cloud, ports in sorted(self.deps.clouds.items()):
            try:
                owned.extend(ports.capacity.list_owned(self.controller))
            except CloudError as err:
                complete = False
                report.errors.append(f"list {cloud}: {error_code(err)}")
                log.warning("listing %s instances failed: %s", cloud, err)
        return owned, complete

    def _pool(self, name: str) -> PoolPolicy | None:
        try:
            return self.policy.pool(name)
        except KeyError:
            return None

    def _offer(self, key: OfferKey) -> Offer | None:
        return self._offers.get((key.cloud, key.region, key.instance_type))

    def _images_for(self, pool: PoolPolicy) -> NodeImages:
        if pool.image:
            return NodeImages({pool.cloud: pool.image})
        return self.deps.images

    def _spec(self, pool: PoolPolicy, key: OfferKey, decision: str) -> PoolSpec | None:
        offer = self._offer(key)
        if offer is None:
            return None
        return spec_for_offer(
            self.policy,
            pool,
            offer,
            key.capacity,
            images=self._images_for(pool),
            decision_id=decision,
            user_data=self.deps.user_data,
            project=self.deps.gcp_project,
        )

    # ------------------------------------------------------------------ the pass

    def run_pass(self) -> PassReport:
        with self.lock:
            return self._run_pass()

    def _run_pass(self) -> PassReport:
        t0 = time.monotonic()
        now = self._now()
        report = PassReport(now_ts=now)
        self._recover_intents(now, report)
        snap = self._observe(now)
        report.stale = snap.stale
        owned, complete = self._list_owned(report)
        self._owned = {o.instance_id: o for o in owned}
        records = self._records(now)
        intents = self.store.intents(kind="scale_up", since_ts=now - self.config.intent_window_s)
        splan = plan_sync(
            SyncInput(
                now_ts=now,
                controller=self.controller,
                records=records,
                owned=owned,
                listing_complete=complete,
                snapshot=snap,
                intents=intents,
                grace_s=self.config.orphan_grace_s,
                join_timeout_s=self.policy.guardrails.join_timeout_s,
                retry_terminate_s=self.config.retry_terminate_s,
                unbound_timeout_s=self.config.unbound_timeout_s,
                timeouts=self._timeouts(),
            )
        )
        self._apply_sync(splan, now, snap, report)
        if self.config.serve_slurm_power_ups and not snap.stale:
            self._serve_power_ups(snap, now, report)
        view = self._enrich(snap, now)
        policy = self._effective_policy()
        plan = make_plan(planning_view(view, policy), policy, self.catalog, self.backoff, now)
        report.decisions = len(plan.decisions)
        report.decisions_recorded = self._record_decisions(plan, now)
        if not view.stale:
            self._act(plan, view, now, report)
        self._register(now, report)
        self._account(view, now, report)
        self.last_snapshot = view
        self.last_plan = plan
        self.passes += 1
        report.seconds = time.monotonic() - t0
        self.last_report = report
        return report

    # ------------------------------------------------------------------ recover

    def _recover_intents(self, now: float, report: PassReport) -> None:
        """Intents still pending at the start of a pass were left by a pass that did not finish
        (a crash): find out from the cloud whether the call happened."""
        for it in self.store.pending_intents():
            try:
                if it.kind == "scale_up":
                    self._recover_scale_up(it, now)
                elif it.kind == "terminate":
                    self._recover_terminate(it, now)
                else:
                    self.store.fail_intent(it.token, now, "unknown_kind", it.kind)
            except CloudError as err:
                report.errors.append(f"recover {it.token[:8]}: {error_code(err)}")
                log.warning("recovering intent %s failed: %s", it.token, err)

    def _recover_scale_up(self, it: Intent, now: float) -> None:
        pool = self._pool(it.pool)
        ports = self.deps.clouds.get(pool.cloud) if pool is not None else None
        spec = self._spec(pool, OfferKey.parse(it.offer), it.decision_id) if pool else None
        if pool is None or ports is None or spec is None:
            self.store.fail_intent(it.token, now, "recover:unknown_pool", it.pool)
            return
        status = ports.capacity.group_status(spec)
        target = int(it.payload.get("target", 0) or 0)
        if status.exists and status.desired >= target > 0:
            self.store.confirm(
                it.token, now, result={"added": it.nodes, "target": target, "recovered": True}
            )
            log.info("recovered scale-up %s: the resize took effect", it.token)
        else:
            self.store.fail_intent(
                it.token, now, "recover:not_sent", "the controller stopped before the cloud call"
            )
            log.info("recovered scale-up %s: the resize never happened", it.token)

    def _recover_terminate(self, it: Intent, now: float) -> None:
        p = it.payload
        owned = OwnedInstance(
            instance_id=it.instance_id,
            cloud=str(p.get("cloud", "")),
            region=str(p.get("region", "")),
            zone=str(p.get("zone", "")),
            instance_type=str(p.get("instance_type", "")),
            state=CloudState.RUNNING,
            launched_ts=0.0,
            group=str(p.get("group", "")),
        )
        ports = self.deps.clouds.get(owned.cloud)
        if ports is None:
            self.store.fail_intent(it.token, now, "recover:unknown_cloud", owned.cloud)
            return
        err = terminate_instance(owned, it.decision_id, ports.capacity)
        if err is not None:
            self.store.fail_intent(it.token, now, error_code(err), str(err))
            return
        self.store.confirm(
            it.token, now, transitions=self._terminating(it.instance_id, str(p.get("reason", "")))
        )
        log.info("recovered termination of %s", it.instance_id)

    def _terminating(self, instance_id: str, reason: str) -> list[tuple[str, InstanceState, str]]:
        si = self.store.instance(instance_id)
        if si is None or si.instance.state not in (
            S.REQUESTED,
            S.ALLOCATED,
            S.JOINING,
            S.READY,
            S.DRAINING,
        ):
            return []
        return [(instance_id, S.TERMINATING, reason or "terminate")]

    # ------------------------------------------------------------------ observe

    def _observe(self, now: float) -> ClusterSnapshot:
        if self.deps.observer is None:
            return ClusterSnapshot(taken_ts=now)
        prev = self.last_snapshot
        if prev is not None:
            prev = replace(prev, instances=(), spend=SpendState())
        try:
            return observe_or_stale(self.deps.observer, previous=prev, now_ts=now)
        except ProvisionerError as exc:  # an observer raising beyond its contract
            base = prev or ClusterSnapshot(taken_ts=now)
            return base.mark_stale(f"slurm: {exc}")

    # ------------------------------------------------------------------ sync

    def _apply_sync(
        self, sp: SyncPlan, now: float, snap: ClusterSnapshot, report: PassReport
    ) -> None:
        by_token: dict[str, list[CloudInstance]] = {}
        for a in sp.adopt:
            by_token.setdefault(a.token, []).append(a.instance)
        for token, insts in by_token.items():
            self.store.confirm(token, now, instances=insts)
            report.adopted += len(insts)
            log.info("adopted %s (intent %s)", [i.instance_id for i in insts], token[:8])
        for b in sp.bind:
            self.store.set_node_name(b.instance_id, b.node)
            log.info("bound %s to slurm node %s", b.instance_id, b.node)
        for m in sp.moves:
            try:
                self.store.transition(m.instance_id, m.to, now, m.reason)
            except (ValueError, ProvisionerError, LookupError) as exc:
                report.errors.append(f"move {m.instance_id}: {exc}")
        for fix in sp.nodes:
            self._fix_node(fix.node, fix.action, fix.reason, report)
        for k in sp.kills:
            reason = ReasonCode.JOIN_TIMEOUT if k.join_failure else ReasonCode.TERMINATE_DRAINED
            did = decision_id(now, reason, k.instance_id)
            if k.transition:
                self.store.record_decisions(
                    [
                        Decision(
                            did,
                            reason,
                            detail={"instance": k.instance_id, "why": k.reason, "by": "sync"},
                        )
                    ],
                    now,
                )
            self._kill(k, did, now, report)

    def _fix_node(self, node: str, action: str, reason: str, report: PassReport) -> None:
        ctl = self.deps.node_control
        if ctl is None:
            return
        try:
            if action == "resume":
                ctl.resume(node)
            else:
                ctl.mark_failed(node, reason)
            log.info("slurm node %s: %s (%s)", node, action, reason)
        except ProvisionerError as exc:
            report.errors.append(f"node {node} {action}: {exc}")

    def _kill(self, k: Kill, did: str, now: float, report: PassReport) -> bool:
        """Terminate one instance, intent first. False when the cloud call failed."""
        ports = self.deps.clouds.get(k.owned.cloud)
        if ports is None:
            report.errors.append(f"terminate {k.instance_id}: no port for {k.owned.cloud}")
            return False
        if k.fail_node:
            self._fix_node(k.fail_node, "fail", k.reason, report)
        token = request_token(did, k.instance_id, "terminate")
        si = self.store.instance(k.instance_id)
        self.store.record_intent(
            "terminate",
            token,
            now,
            pool=si.instance.pool if si else str(k.owned.pool),
            instance_id=k.instance_id,
            decision_id=did,
            payload={
                "reason": k.reason,
                "cloud": k.owned.cloud,
                "region": k.owned.region,
                "zone": k.owned.zone,
                "instance_type": k.owned.instance_type,
                "group": k.owned.group,
            },
        )
        self._hook(STEP_TERMINATE_AFTER_INTENT)
        err = terminate_instance(k.owned, did, ports.capacity)
        if err is not None:
            self.store.fail_intent(token, now, error_code(err), str(err))
            report.errors.append(f"terminate {k.instance_id}: {error_code(err)}")
            return False
        self._hook(STEP_TERMINATE_AFTER_CLOUD)
        moves = self._terminating(k.instance_id, k.reason) if k.transition else []
        self.store.confirm(token, now, transitions=moves)
        report.terminated += 1
        log.info("terminated %s: %s", k.instance_id, k.reason)
        return True

    # ------------------------------------------------------------------ the planner's view

    def _enrich(self, snap: ClusterSnapshot, now: float) -> ClusterSnapshot:
        live = self.store.instances(live_only=True)
        by_node = {si.instance.node_name: si.instance for si in live if si.instance.node_name}
        nodes = []
        for n in snap.nodes:
            inst = by_node.get(n.name) if n.kind is NodeKind.BURST else None
            if inst is not None:
                n = replace(n, instance_id=inst.instance_id, pool=inst.pool)
            nodes.append(n)
        # NVML: each node carries its fresh samples only (none: "no NVML sample")
        loads = gpu_load_from_store(self.store, now, self.config.telemetry_max_age_s)
        snap = attach_gpu_load(replace(snap, nodes=tuple(nodes)), loads)
        # The planner counts only the GPUs Slurm has not yet placed jobs on (via instance_id).
        instances = [si.instance for si in live]
        instances += self._placeholders(live, now)
        op = self.store.operator_state()
        return replace(
            snap,
            instances=tuple(instances),
            spend=self._spend(live, instances, now),
            paused=op.paused,
        )

    def _placeholders(self, live: Sequence[StoredInstance], now: float) -> list[CloudInstance]:
        """Capacity a confirmed scale-up asked for that the listing does not show yet: counted
        as requested so the next pass does not buy it twice."""
        seen: dict[str, int] = {}
        for si in self.store.instances(live_only=False):
            if si.intent_token:
                seen[si.intent_token] = seen.get(si.intent_token, 0) + 1
        out: list[CloudInstance] = []
        since = now - self.config.placeholder_s
        for it in self.store.intents(kind="scale_up", status="confirmed", since_ts=since):
            missing = int(it.result.get("added", 0) or 0) - seen.get(it.token, 0)
            if missing <= 0 or it.result.get("recovered"):
                continue
            pool = self._pool(it.pool)
            if pool is None:
                continue
            for i in range(missing):
                out.append(
                    CloudInstance(
                        instance_id=f"pending:{it.token[:8]}:{i}",
                        pool=it.pool,
                        offer=OfferKey.parse(it.offer),
                        gpu_model=str(it.payload.get("gpu_model", "")),
                        gpus=int(it.payload.get("gpus", 0) or 0),
                        price_usd_hr=it.price_usd_hr or Decimal(0),
                        state=S.REQUESTED,
                        launched_ts=it.created_ts,
                        decision_id=it.decision_id,
                    )
                )
        return out

    def _spend(
        self, live: Sequence[StoredInstance], instances: Sequence[CloudInstance], now: float
    ) -> SpendState:
        burn = sum((i.price_usd_hr for i in instances), Decimal(0))
        status = budget_status(self.store, now)
        spent = {t.team: t.spent_usd for t in status.teams}
        committed: dict[str, Decimal] = {}
        teams = {si.instance.instance_id: si.team for si in live}
        for inst in instances:
            if inst.state not in _IN_FLIGHT:
                continue
            d = self.store.decision(inst.decision_id) if inst.decision_id else None
            if d is None:
                continue
            chosen = next((a for a in d.decision.alternatives if a.chosen), None)
            if chosen is None:
                continue
            team = teams.get(inst.instance_id, d.decision.team)
            committed[team] = committed.get(team, Decimal(0)) + chosen.expected_cost_usd
        return SpendState(burn, spent, committed)

    def _effective_policy(self) -> Policy:
        """Drained pools take no new nodes: the planner sees them with max_nodes 0."""
        drained = frozenset(self.store.operator_state().drained_pools)
        if not drained:
            return self.policy
        if self._drained_policy is None or self._drained_policy[0] != drained:
            pools = [
                p.model_copy(update={"max_nodes": 0}) if p.name in drained else p
                for p in self.policy.pools
            ]
            self._drained_policy = (drained, self.policy.model_copy(update={"pools": pools}))
        return self._drained_policy[1]

    # ------------------------------------------------------------------ decisions

    def _record_decisions(self, plan: Plan, now: float) -> int:
        """Actions are always recorded; verdicts (wait, blocked, keep) when they change for
        their subject, so an unchanged queue does not write a row per job per pass."""
        keep: list[Decision] = []
        subjects: set[str] = set()
        for d in plan.decisions:
            subject = (
                ",".join(d.job_ids) or d.detail.get("node", "") or d.detail.get("instance", "")
            )
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

    # ------------------------------------------------------------------ act

    def _act(self, plan: Plan, view: ClusterSnapshot, now: float, report: PassReport) -> None:
        jobs = {j.job_id: j for j in view.pending}
        for su in plan.scale_ups:
            try:
                self._scale_up(su, view, jobs, now, report)
            except (CloudError, ProvisionerError) as exc:
                report.errors.append(f"scale-up {su.pool}: {exc}")
                log.warning("scale-up for %s failed: %s", su.pool, exc)
        for d in plan.decisions:
            if d.reason is ReasonCode.COVERED_BY_INFLIGHT:
                pool = self._pool(d.detail.get("pool", ""))
                if pool is not None:
                    self._move_jobs(d.job_ids, pool, jobs, report)
        for dr in plan.drains:
            self._drain(dr, now, report)
        for t in plan.terminations:
            si = self.store.instance(t.instance_id) if t.instance_id else None
            if si is None or si.instance.state not in (
                S.REQUESTED,
                S.ALLOCATED,
                S.JOINING,
                S.READY,
                S.DRAINING,
            ):
                continue
            owned = self._owned.get(t.instance_id)
            inst = si.instance
            join = t.decision.reason is ReasonCode.JOIN_TIMEOUT
            k = Kill(
                inst.instance_id,
                owned or owned_from_record(inst),
                f"{t.decision.reason}: {t.decision.decision_id}",
                fail_node=inst.node_name if join and inst.node_name else "",
                join_failure=join,
            )
            self._kill(k, t.decision.decision_id, now, report)

    def _fallback_specs(self, su: ScaleUp, pool: PoolPolicy) -> list[PoolSpec]:
        """The chosen offer, then the costlier ones the planner listed that the same pool allows,
        with the same node shape and within the budget headroom left after the chosen one."""
        d = su.decision
        chosen = next((a for a in d.alternatives if a.chosen), None)
        keys: list[OfferKey] = [su.offer]
        allowed_caps = set(pool_capacities(pool))
        req = pool_request(pool, su.gpus_per_node, self.policy.onprem.equivalent_gpu_models)
        for a in d.alternatives:
            if a.chosen or a.rejected_because not in ("", "costlier") or a.offer in keys:
                continue
            if a.offer.cloud != pool.cloud or a.offer.capacity not in allowed_caps:
                continue
            offer = self._offer(a.offer)
            if offer is None or offer.whole_gpus != su.gpus_per_node:
                continue
            if not offer_fits(offer, req, a.offer.capacity):
                continue
            if chosen is not None:
                extra_hr = (a.usd_per_hour - chosen.usd_per_hour) * su.nodes
                if d.global_headroom_usd_hr is not None and extra_hr > d.global_headroom_usd_hr:
                    continue
                extra = a.expected_cost_usd - chosen.expected_cost_usd
                if d.team_headroom_usd is not None and extra > d.team_headroom_usd:
                    continue
            keys.append(a.offer)
        specs = []
        for key in keys:
            spec = self._spec(pool, key, d.decision_id)
            if spec is not None:
                specs.append(spec)
        return specs

    def _scale_up(
        self,
        su: ScaleUp,
        view: ClusterSnapshot,
        jobs: Mapping[str, Any],
        now: float,
        report: PassReport,
    ) -> None:
        pool = self._pool(su.pool)
        ports = self.deps.clouds.get(pool.cloud) if pool is not None else None
        did = su.decision.decision_id
        report.scale_ups += 1
        report.nodes_requested += su.nodes
        if pool is None or ports is None:
            self._failed_without_call(su, "config:no_cloud_port", now)
            report.errors.append(f"scale-up {su.pool}: no cloud port")
            return
        try:
            specs = self._fallback_specs(su, pool)
        except KeyError as exc:  # no boot image configured for the region
            self._failed_without_call(su, "config:no_image", now, str(exc))
            report.errors.append(f"scale-up {su.pool}: {exc}")
            return
        team = su.decision.team or pool.team
        tokens: dict[OfferKey, str] = {}

        def record(spec: PoolSpec, target: int, token: str) -> None:
            before = ports.capacity.group_status(spec).desired
            offer = self._offer(spec.offer)
            price = offer.price(spec.capacity) if offer is not None else None
            self.store.record_intent(
                "scale_up",
                token,
                now,
                pool=pool.name,
                offer=spec.offer,
                nodes=max(0, target - before),
                decision_id=did,
                team=team,
                price_usd_hr=price,
                payload={
                    "target": target,
                    "group": spec.group_name,
                    "gpus": spec.gpus,
                    "gpu_model": spec.gpu_model,
                    "jobs": list(su.job_ids),
                },
            )
            tokens[spec.offer] = token
            self._hook(STEP_SCALE_UP_AFTER_INTENT)

        outcome = scale_up_with_fallback(
            specs,
            su.nodes,
            ports={pool.cloud: ports},
            backoff=self.backoff,
            now_ts=now,
            settings=self.settings,
            record_intent=record,
        )
        self._hook(STEP_SCALE_UP_AFTER_CLOUD)
        self.backoff = outcome.backoff
        placed = {p.token for p in outcome.placed}
        partial = {f.offer: f.error for f in outcome.failed}
        for p in outcome.placed:
            result: dict[str, Any] = {"added": p.added, "target": p.target, "group": p.group}
            if p.offer in partial:
                result["shortfall_code"] = error_code(partial[p.offer])
            self.store.confirm(p.token, now, result=result)
        for f in outcome.failed:
            tok = tokens.get(f.offer)
            if tok is None:
                self._failed_without_call(su, error_code(f.error), now, str(f.error), f.offer)
            elif tok not in placed:
                self.store.fail_intent(tok, now, error_code(f.error), str(f.error))
        report.nodes_placed += outcome.placed_nodes
        if outcome.placed:
            owned = ports.capacity.list_owned(self.controller)
            recent = self.store.intents(kind="scale_up", since_ts=now - self.config.intent_window_s)
            adopt = plan_adoptions(
                owned, self._records(now), recent, controller=self.controller, now_ts=now
            )
            by_token: dict[str, list[CloudInstance]] = {}
            for a in adopt:
                by_token.setdefault(a.token, []).append(a.instance)
            for token, insts in by_token.items():
                self.store.confirm(token, now, instances=insts)
                report.adopted += len(insts)
            self._hook(STEP_SCALE_UP_BEFORE_REGISTER)
            self._move_jobs(su.job_ids, pool, jobs, report)
        log.info(
            "scale-up %s: %d of %d node(s) placed (%s)",
            su.pool,
            outcome.placed_nodes,
            su.nodes,
            did,
        )

    def _serve_power_ups(self, snap: ClusterSnapshot, now: float, report: PassReport) -> None:
        """Slurm-driven mode: burst nodes Slurm is powering up that no instance holds or can
        hold (no unbound instance of the pool, no launch still to be listed) get one, the
        cheapest offer of the node's pool that back-off, the pool's size and the global $/h cap
        allow. Paused bursting or a drained pool gets none: the node times out in Slurm."""
        if self.store.operator_state().paused:
            return
        live = self.store.instances(live_only=True)
        held = {si.instance.node_name for si in live if si.instance.node_name}
        spare: dict[str, int] = {}
        for si in live:
            if not si.instance.node_name and si.instance.state in (S.REQUESTED, S.ALLOCATED):
                spare[si.instance.pool] = spare.get(si.instance.pool, 0) + 1
        for ph in self._placeholders(live, now):
            spare[ph.pool] = spare.get(ph.pool, 0) + 1
        policy = self._effective_policy()
        burn = sum((si.instance.price_usd_hr for si in live), Decimal(0))
        count = {p.name: 0 for p in policy.pools}
        for si in live:
            count[si.instance.pool] = count.get(si.instance.pool, 0) + 1
        jobs_on: dict[str, list[str]] = {}
        accounts: dict[str, str] = {}
        for j in snap.running:
            for n in j.nodes:
                jobs_on.setdefault(n, []).append(j.job_id)
                accounts.setdefault(n, j.account)
        for node in sorted(snap.nodes, key=lambda n: n.name):
            if node.kind is not NodeKind.BURST or node.state is not NodeState.POWERING_UP:
                continue
            if node.name in held or not node.pool:
                continue
            if spare.get(node.pool, 0) > 0:
                spare[node.pool] -= 1
                continue
            try:
                pool = policy.pool(node.pool)
            except KeyError:
                continue
            if count.get(pool.name, 0) + 1 > pool.max_nodes:
                continue
            cand = self._cheapest(pool, node.gpus or 1, node.gpu_type, now)
            if cand is None:
                continue
            cap = policy.budgets.global_usd_per_hour
            if cap is not None and burn + cand.usd_hr > cap:
                continue
            job_ids = tuple(jobs_on.get(node.name, ()))
            expected = Decimal(
                repr(round(cand.expected_cost(self._runtime(), self.policy.spot), 6))
            )
            d = Decision(
                decision_id(now, ReasonCode.BURST_URGENT, node.name, *job_ids),
                ReasonCode.BURST_URGENT,
                job_ids,
                chosen=cand.key,
                alternatives=(Alternative(cand.key, cand.usd_hr, expected, True),),
                team=self.policy.budgets.team_for(accounts.get(node.name, "")),
                detail={"by": "slurm", "node": node.name, "pool": pool.name},
            )
            self.store.record_decisions([d], now)
            su = ScaleUp(
                pool.name, cand.key, 1, cand.gpus_per_node, cand.usd_hr_per_node, job_ids, d
            )
            try:
                self._scale_up(su, snap, {}, now, report)
            except (CloudError, ProvisionerError) as exc:
                report.errors.append(f"scale-up for {node.name}: {exc}")
                continue
            burn += cand.usd_hr
            count[pool.name] = count.get(pool.name, 0) + 1
            log.info("slurm powers up %s: an instance was requested for it", node.name)

    def _runtime(self) -> float:
        return (
            self.policy.waiting.default.default_runtime_s or self.policy.onprem.fallback_runtime_s
        )

    def _cheapest(self, pool: PoolPolicy, gpus: int, gpu_type: str, now: float) -> Candidate | None:
        model = pool.gpu_model or gpu_type or self.policy.onprem.gpu_model
        cands = candidates_for(
            gpus,
            model,
            [pool],
            self.catalog,
            pool_capacities(pool),
            self.policy.spot,
            self.policy.onprem.equivalent_gpu_models,
        )
        for c in rank(cands, self._runtime(), self.policy.spot):
            if c.nodes == 1 and c.gpus_per_node >= gpus and not self.backoff.blocked(c.key, now):
                return c
        return None

    def _failed_without_call(
        self, su: ScaleUp, code: str, now: float, error: str = "", offer: OfferKey | None = None
    ) -> None:
        """A scale-up that failed before any resize (no group, no image): kept as a failed
        intent, so the failure is counted and, for capacity/quota, backs the offer off."""
        key = offer or su.offer
        token = request_token(su.decision.decision_id, str(key), "not-sent")
        self.store.record_intent(
            "scale_up",
            token,
            now,
            pool=su.pool,
            offer=key,
            nodes=0,
            decision_id=su.decision.decision_id,
            team=su.decision.team,
            payload={"jobs": list(su.job_ids)},
        )
        self.store.fail_intent(token, now, code, error)

    def _move_jobs(
        self,
        job_ids: Iterable[str],
        pool: PoolPolicy,
        jobs: Mapping[str, Any],
        report: PassReport,
    ) -> None:
        """Let Slurm place burst jobs on the pool's nodes: add the pool's partition."""
        ctl = self.deps.job_control
        if ctl is None:
            return
        for jid in job_ids:
            job = jobs.get(jid)
            if job is None or pool.partition in job.partitions:
                continue
            parts = [*job.partitions, pool.partition]
            try:
                ctl.set_partitions(jid, parts)
                report.jobs_moved += 1
                log.info("job %s may now run in %s", jid, ",".join(parts))
            except (ProvisionerError, ValueError) as exc:
                report.errors.append(f"job {jid}: {exc}")

    def _drain(self, dr: Drain, now: float, report: PassReport) -> None:
        si = self.store.instance(dr.instance_id) if dr.instance_id else None
        ctl = self.deps.node_control
        if si is None or si.instance.state is not S.READY or ctl is None:
            return
        reason = f"idle, drained by {self.controller} ({dr.decision.decision_id})"
        try:
            ctl.drain_and_power_down(dr.node, reason)
        except ProvisionerError as exc:
            report.errors.append(f"drain {dr.node}: {exc}")
            return
        self._hook(STEP_DRAIN_AFTER_SLURM)
        self.store.transition(dr.instance_id, S.DRAINING, now, f"idle: {dr.decision.decision_id}")
        report.drained += 1
        log.info("draining %s (%s)", dr.node, dr.instance_id)

    # ------------------------------------------------------------------ register

    def _register(self, now: float, report: PassReport) -> None:
        if self.deps.launcher is not None:
            keep = now - 3600.0
            bound = [
                si.instance
                for si in self.store.instances()
                if si.instance.node_name
                and (not si.instance.state.terminal or (si.ended_ts or now) >= keep)
            ]
            # a node name may have been held by an older instance: the newest record wins
            latest: dict[str, CloudInstance] = {}
            for inst in sorted(bound, key=lambda i: (i.launched_ts, i.instance_id)):
                latest[inst.node_name] = inst
            try:
                started, stopped = self.deps.launcher.sync(latest.values())
                if started or stopped:
                    log.info("launcher: started %s, stopped %s", started, stopped)
            except ProvisionerError as exc:
                report.errors.append(f"launcher: {exc}")
        if self.deps.power_queue is not None:
            res = process_power_requests(self.deps.power_queue, _AckHandler(), now)
            for req, why in res.failed:
                report.errors.append(f"power request {req.request_id}: {why}")

    # ------------------------------------------------------------------ account

    def _account(self, view: ClusterSnapshot, now: float, report: PassReport) -> None:
        if not view.stale:
            self._record_usage(view, now)
        res: AccountingResult = self.accountant.run(now)
        report.ledger_rows = res.rows
        report.ledger_usd = res.cost
        onprem = {n.name for n in view.nodes if n.kind is NodeKind.ONPREM}
        if onprem and not view.stale:
            energy = bill_energy(self.store, self.policy, now, onprem_nodes=onprem)
            report.ledger_rows += energy.rows
            report.ledger_usd += energy.cost

    def _record_usage(self, view: ClusterSnapshot, now: float) -> None:
        closed = self.tracker.update(view.jobs, now, view.nodes)
        open_ = self.tracker.open_records
        kinds = {n.name: n for n in view.nodes}
        live = {
            si.instance.node_name: si.instance
            for si in self.store.instances()
            if si.instance.node_name
            and (not si.instance.state.terminal or (si.ended_ts or now) >= now - 3600)
        }
        team_for = self.policy.budgets.team_for
        rows: list[JobUsage] = []

        def usage(r: UsageRecord) -> JobUsage | None:
            node = kinds.get(r.node)
            inst = live.get(r.node)
            if r.end_ts is None and node is not None and node.state is NodeState.POWERING_UP:
                return None  # allocated to a booting node: its GPU time starts when it is up
            if node is not None and node.kind is NodeKind.ONPREM:
                iid, pool = "", ""
            elif inst is not None:
                iid, pool = inst.instance_id, inst.pool
            else:
                return None  # a burst node with no instance known: nothing to charge it to
            return JobUsage(
                job_id=r.job_id,
                node_name=r.node,
                gpus=r.gpus,
                start_ts=r.start_ts,
                end_ts=r.end_ts,
                instance_id=iid,
                pool=pool,
                account=r.account,
                team=team_for(r.account),
                partition=r.partition,
                user=r.user,
            )

        for r in (*closed, *open_):
            key = (r.job_id, r.node, r.start_ts)
            if key in self._usage_written and self._usage_written[key] == r.end_ts:
                continue
            u = usage(r)
            if u is not None:
                rows.append(u)
                self._usage_written[key] = r.end_ts
        # Open rows in the store the tracker no longer holds open: Slurm reset the job's start
        # (its node powered up) or the job ended while the controller was down.
        current = {(r.job_id, r.node): r.start_ts for r in open_}
        done = {(r.job_id, r.node, r.start_ts) for r in closed}
        ends = {j.job_id: j.end_ts for j in view.jobs}
        for u in self.store.job_usage(overlapping=(now, now + 1.0)):
            if u.end_ts is not None:
                continue
            key2 = (u.job_id, u.node_name)
            if current.get(key2) == u.start_ts or (u.job_id, u.node_name, u.start_ts) in done:
                continue
            end = u.start_ts if key2 in current else (ends.get(u.job_id) or now)
            rows.append(replace(u, end_ts=max(end, u.start_ts)))
            self._usage_written[(u.job_id, u.node_name, u.start_ts)] = end
        if rows:
            self.store.record_job_usage(rows)
        if len(self._usage_written) > 50_000:
            self._usage_written = {k: v for k, v in self._usage_written.items() if v is None}

    # ------------------------------------------------------------------ for the API

    def dry_run(self) -> Plan:
        """The plan the controller would make now (nothing is acted on)."""
        now = self._now()
        snap = self.last_snapshot or ClusterSnapshot(taken_ts=now)
        policy = self._effective_policy()
        return make_plan(planning_view(snap, policy), policy, self.catalog, self.backoff, now)

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
                }
            )
        out["backoff"] = {
            str(k): {"until_ts": e.until_ts, "failures": e.failures, "code": e.last_code}
            for k, e in self.backoff.entries.items()
        }
        return out


class ControllerLoop:
    """Runs passes every `tick_s` until stopped. A stop request (SIGTERM) lets the current
    pass finish; the wait between passes is an Event wait, so a stop ends it at once."""

    def __init__(
        self,
        reconciler: Reconciler,
        tick_s: float,
        *,
        on_pass: Callable[[PassReport], None] | None = None,
        before_pass: Callable[[], None] | None = None,
    ) -> None:
        self.reconciler = reconciler
        self.tick_s = tick_s
        self.on_pass = on_pass
        self.before_pass = before_pass
        self._stop = threading.Event()
        self.failures = 0

    def request_stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self, max_passes: int | None = None) -> int:
        n = 0
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                if self.before_pass is not None:
                    self.before_pass()
                report = self.reconciler.run_pass()
            except Exception:  # a bug or a store outage: log it, keep the controller up
                self.failures += 1
                log.exception("reconcile pass failed")
            else:
                if self.on_pass is not None:
                    self.on_pass(report)
            n += 1
            if max_passes is not None and n >= max_passes:
                break
            self._stop.wait(max(0.0, self.tick_s - (time.monotonic() - t0)))
        return n
