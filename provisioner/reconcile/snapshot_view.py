"""Observe, and the planner's view of what was observed.

`observe` takes the Slurm snapshot (stale, never raising, when Slurm does not answer);
`list_owned` the clouds' instances carrying this controller's tags. `enrich` then adds what the
store knows: each burst node's instance, the fresh NVML samples, the instances live and the
launches not listed yet (`placeholders`), the spend the hard budgets need, and the pause switch.
`EffectivePolicy` is the policy as the planner sees it, drained pools closed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Protocol

from provisioner.account.budgets import BudgetReads, budget_status
from provisioner.act.ports import CloudPorts, CloudState, OwnedInstance, PartialListing
from provisioner.config.models import Policy
from provisioner.domain.errors import CloudError, InvalidArgument, ProvisionerError
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.nodes import GpuSample, NodeKind
from provisioner.domain.offers import OfferKey
from provisioner.domain.records import StoredInstance
from provisioner.domain.snapshot import ClusterSnapshot, SpendState
from provisioner.domain.telemetry import DEFAULT_MAX_AGE_S, fresh
from provisioner.observe.slurm.observer import SlurmObserver, observe_or_stale
from provisioner.plan.gpu_view import attach_gpu_load
from provisioner.ports.store import DecisionLog, PolicyRepo, TelemetryRepo
from provisioner.reconcile.context import PassContext, PassReport
from provisioner.reconcile.outcomes import error_code
from provisioner.reconcile.sync import orphan_record

log = logging.getLogger("provisioner.loop")

S = InstanceState

_IN_FLIGHT = (S.REQUESTED, S.ALLOCATED, S.JOINING)


def observe(
    observer: SlurmObserver | None, previous: ClusterSnapshot | None, now: float
) -> ClusterSnapshot:
    if observer is None:
        return ClusterSnapshot(taken_ts=now)
    prev = previous
    if prev is not None:
        prev = replace(prev, instances=(), spend=SpendState())
    try:
        return observe_or_stale(observer, previous=prev, now_ts=now)
    except ProvisionerError as exc:  # an observer raising beyond its contract
        base = prev or ClusterSnapshot(taken_ts=now)
        return base.mark_stale(f"slurm: {exc}")


@dataclass(frozen=True, slots=True)
class Listing:
    """One pass's listing of this controller's instances in every cloud. `gaps`: for each cloud
    that answered in part or not at all, why. The machines it did not list may still run, and
    cost, so nothing is taken as gone from it and the $/h cap cannot be checked against it."""

    owned: list[OwnedInstance]
    gaps: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.gaps


def list_owned(clouds: Mapping[str, CloudPorts], controller: str, report: PassReport) -> Listing:
    owned: list[OwnedInstance] = []
    gaps: list[str] = []
    for cloud, ports in sorted(clouds.items()):
        try:
            owned.extend(ports.capacity.list_owned(controller))
        except CloudError as err:
            if isinstance(err, PartialListing):
                owned.extend(err.listed)  # the part that answered is real
            text = str(err)
            gaps.append(text if text.startswith(f"{cloud}:") else f"{cloud}: {text}")
            report.errors.append(f"list {cloud}: {error_code(err)}")
            log.warning("listing %s instances failed: %s", cloud, err)
    return Listing(owned, tuple(gaps))


def enrich(
    ctx: PassContext,
    snap: ClusterSnapshot,
    now: float,
    listing: Listing | None = None,
) -> ClusterSnapshot:
    """The planner's view: Slurm's snapshot with the instances (records, launches not listed
    yet, and machines the cloud runs for us that the store does not know), the spend (short
    of what a cloud listed in part runs: `spend.unknown` says so), the NVML load and the pause
    switch."""
    listing = listing or Listing([])
    store = ctx.store
    live = store.instances(live_only=True)
    by_node = {si.instance.node_name: si.instance for si in live if si.instance.node_name}
    nodes = []
    for n in snap.nodes:
        inst = by_node.get(n.name) if n.kind is NodeKind.BURST else None
        if inst is not None:
            n = replace(n, instance_id=inst.instance_id, pool=inst.pool)
        nodes.append(n)
    # NVML: each node carries its fresh samples only (none: "no NVML sample")
    loads = gpu_load_from_store(store, now, ctx.config.telemetry_max_age_s)
    snap = attach_gpu_load(replace(snap, nodes=tuple(nodes)), loads)
    # The planner counts only the GPUs Slurm has not yet placed jobs on (via instance_id).
    instances = [si.instance for si in live]
    instances += placeholders(ctx, live, now)
    instances += unrecorded(ctx, live, listing.owned, now)
    op = store.operator_state()
    known = spend(store, live, instances, now)
    return replace(
        snap,
        instances=tuple(instances),
        spend=replace(known, unknown="; ".join(listing.gaps)),
        paused=op.paused,
    )


def unrecorded(
    ctx: PassContext,
    live: Sequence[StoredInstance],
    owned: Sequence[OwnedInstance],
    now: float,
) -> list[CloudInstance]:
    """Machines the cloud runs with our tag that the store has no record of yet (a crash, a
    store restored from an older copy): until the sweep records them they still cost money,
    so the budgets and pool sizes count them. As orphans, they serve no job in the plan."""
    known = {si.instance.instance_id for si in live}
    known |= {si.instance.instance_id for si in ctx.records(now)}
    return [
        orphan_record(o, ctx.offers_by_type, now)
        for o in owned
        if o.controller == ctx.controller
        and o.state in (CloudState.PENDING, CloudState.RUNNING)
        and o.instance_id not in known
    ]


def seen_by_intent(ctx: PassContext) -> dict[str, int]:
    """How many instances each intent's call has shown so far (stored under its token)."""
    seen: dict[str, int] = {}
    for si in ctx.store.instances(live_only=False):
        if si.intent_token:
            seen[si.intent_token] = seen.get(si.intent_token, 0) + 1
    return seen


def placeholders(
    ctx: PassContext, live: Sequence[StoredInstance], now: float
) -> list[CloudInstance]:
    """Capacity a confirmed scale-up asked for that the listing does not show yet: counted
    as requested so the next pass does not buy it twice."""
    seen = seen_by_intent(ctx)
    out: list[CloudInstance] = []
    since = now - ctx.config.placeholder_s
    for it in ctx.store.intents(kind="scale_up", status="confirmed", since_ts=since):
        missing = int(it.result.get("added", 0) or 0) - seen.get(it.token, 0)
        if missing <= 0 or it.result.get("recovered"):
            continue
        pool = ctx.pool(it.pool)
        if pool is None:
            continue
        for i in range(missing):
            out.append(
                CloudInstance(
                    instance_id=f"pending:{it.token[:8]}:{i}",
                    pool=it.pool,
                    offer=OfferKey.parse(it.offer),
                    gpu_model=it.scale_up_payload.gpu_model,
                    gpus=it.scale_up_payload.gpus,
                    price_usd_hr=it.price_usd_hr or Decimal(0),
                    state=S.REQUESTED,
                    launched_ts=it.created_ts,
                    decision_id=it.decision_id,
                )
            )
    return out


class SpendReads(BudgetReads, DecisionLog, Protocol):
    """What the spend view reads: the budget status's reads, and the decisions in flight."""


def spend(
    store: SpendReads,
    live: Sequence[StoredInstance],
    instances: Sequence[CloudInstance],
    now: float,
) -> SpendState:
    burn = sum((i.price_usd_hr for i in instances), Decimal(0))
    status = budget_status(store, now)
    spent = {t.team: t.spent_usd for t in status.teams}
    committed: dict[str, Decimal] = {}
    teams = {si.instance.instance_id: si.team for si in live}
    for inst in instances:
        if inst.state not in _IN_FLIGHT:
            continue
        d = store.decision(inst.decision_id) if inst.decision_id else None
        if d is None:
            continue
        chosen = next((a for a in d.decision.alternatives if a.chosen), None)
        if chosen is None:
            continue
        team = teams.get(inst.instance_id, d.decision.team)
        committed[team] = committed.get(team, Decimal(0)) + chosen.expected_cost_usd
    return SpendState(burn, spent, committed)


class EffectivePolicy:
    """The policy the planner plans with; the variant for a set of drained pools is cached."""

    def __init__(self, store: PolicyRepo, policy: Policy) -> None:
        self.store = store
        self.policy = policy
        self._drained_policy: tuple[frozenset[str], Policy] | None = None

    def adopt(self, policy: Policy) -> None:
        """Plan with `policy` from now on (the waiting policy chosen from the past)."""
        if policy is not self.policy:
            self.policy = policy
            self._drained_policy = None

    def current(self) -> Policy:
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


def gpu_load_from_store(
    store: TelemetryRepo, now_ts: float, max_age_s: float = DEFAULT_MAX_AGE_S
) -> dict[str, tuple[GpuSample, ...]]:
    """Fresh GPU samples per node name, in GPU index order. Stale GPUs are omitted; a node
    with none fresh (or whose agent has not been heard from within `max_age_s`) is absent."""
    if max_age_s < 0:
        raise InvalidArgument("max_age_s must not be negative")
    out: dict[str, tuple[GpuSample, ...]] = {}
    for nt in store.telemetry():
        if not fresh(nt.received_ts, now_ts, max_age_s):
            continue
        gpus = tuple(
            sorted(
                (g for g in nt.gpus if fresh(g.sampled_ts, now_ts, max_age_s)),
                key=lambda g: g.index,
            )
        )
        if gpus:
            out[nt.node] = gpus
    return out
