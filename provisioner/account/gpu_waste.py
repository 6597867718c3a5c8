"""GPU waste and health accounting from the stored telemetry payloads: allocated-but-idle GPUs
and what they cost, and the health alerts (the API's `/v1/gpus/*` and the `provisioner_gpu_*`
metrics)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal, Protocol

from pydantic import ValidationError

from provisioner.config.models import Policy
from provisioner.domain.money import MICRO, cost_for_seconds
from provisioner.domain.nodes import NodeKind
from provisioner.domain.records import JobUsage, StoredPayload
from provisioner.domain.telemetry import (
    DEFAULT_MAX_AGE_S,
    GpuAlert,
    GpuReading,
    GpuTelemetry,
    HealthThresholds,
    fresh,
    gpu_idle,
    health_alerts,
)
from provisioner.ports.store import InstanceRepo, Ledger, TelemetryRepo


class GpuReads(TelemetryRepo, InstanceRepo, Ledger, Protocol):
    """What the GPU views read: the nodes' payloads, the burst instances, the jobs on each."""


log = logging.getLogger("provisioner.observe.gpu_load")

# Health alerts stay up this long after a node's last push (ECC and Xid state outlive a sample).
DEFAULT_ALERT_MAX_AGE_S = 900.0


@dataclass(frozen=True, slots=True)
class NodePayload:
    telemetry: GpuTelemetry
    received_ts: float
    idle_since: Mapping[int, float]


def latest_payloads(
    store: TelemetryRepo, now_ts: float, max_age_s: float, node: str | None = None
) -> tuple[dict[str, NodePayload], dict[str, float]]:
    """Fresh stored payloads by node, and the nodes whose last payload is older (their last
    sample time). A payload that no longer parses (schema changed) is logged and skipped."""
    out: dict[str, NodePayload] = {}
    silent: dict[str, float] = {}
    for sp in store.telemetry_payloads(node):
        if not (
            fresh(sp.sampled_ts, now_ts, max_age_s) and fresh(sp.received_ts, now_ts, max_age_s)
        ):
            silent[sp.node] = sp.sampled_ts
            continue
        t = _parse(sp)
        if t is not None:
            out[sp.node] = NodePayload(t, sp.received_ts, sp.idle_since)
    return out, silent


def _parse(sp: StoredPayload) -> GpuTelemetry | None:
    try:
        return GpuTelemetry.model_validate(sp.payload)
    except ValidationError:
        log.warning("stored telemetry of node %s no longer parses; skipped", sp.node)
        return None


def health_thresholds(policy: Policy) -> HealthThresholds:
    h = policy.health
    return HealthThresholds(
        temperature_warn_c=h.temperature_warn_c,
        temperature_critical_c=h.temperature_critical_c,
        ecc_dbe_volatile_max=h.ecc_dbe_volatile_max,
        xid_critical=frozenset(h.xid_critical),
        xid_ignore=frozenset(h.xid_ignore),
    )


@dataclass(frozen=True, slots=True)
class AlertsReport:
    alerts: tuple[tuple[GpuAlert, float], ...]  # (alert, sampled_ts of its payload)
    silent_nodes: Mapping[str, float]  # node -> last sample time, for nodes past max_age_s
    thresholds: HealthThresholds


def gpu_alerts(
    store: GpuReads,
    policy: Policy,
    now_ts: float,
    max_age_s: float = DEFAULT_ALERT_MAX_AGE_S,
    node: str | None = None,
) -> AlertsReport:
    """Health alerts from each node's latest payload not older than `max_age_s`."""
    th = health_thresholds(policy)
    payloads, silent = latest_payloads(store, now_ts, max_age_s, node)
    alerts = tuple(
        (a, p.telemetry.sampled_ts)
        for name in sorted(payloads)
        for p in (payloads[name],)
        for a in health_alerts(p.telemetry, th)
    )
    return AlertsReport(alerts, dict(sorted(silent.items())), th)


WasteBasis = Literal["idle_with_process", "idle_unmapped"]


@dataclass(frozen=True, slots=True)
class WasteItem:
    """GPUs allocated by Slurm that NVML measures idle.

    `idle_with_process`: NVML saw a process of `job_id` on GPU `gpu_index`, and the GPU is idle.
    `idle_unmapped`: the job holds GPUs (per its usage record) on which NVML saw none of its
    processes; `gpus` is how many of them are idle at least (GPU unknown: NVML does not say
    which GPUs Slurm allocated). When several jobs could own them, `job_id` is '' and
    `candidate_jobs` names them.
    """

    node: str
    node_kind: NodeKind
    gpus: int
    basis: WasteBasis
    gpu_index: int | None
    gpu_uuid: str
    job_id: str
    team: str
    account: str
    user: str
    partition: str
    util_pct: float | None
    mem_used_mib: int | None
    idle_since_ts: float
    idle_s: float
    usd_per_gpu_hour: Decimal
    candidate_jobs: tuple[str, ...] = ()

    @property
    def usd_per_hour(self) -> Decimal:
        return (self.usd_per_gpu_hour * self.gpus).quantize(MICRO)

    @property
    def usd_so_far(self) -> Decimal:
        """What the idle time cost, since the GPU went idle (or the job started, if later)."""
        return cost_for_seconds(self.usd_per_gpu_hour * self.gpus, self.idle_s)


@dataclass(frozen=True, slots=True)
class WasteReport:
    items: tuple[WasteItem, ...]
    silent_nodes: Mapping[str, float]
    util_threshold_pct: float
    mem_threshold_mib: float | None

    @property
    def gpus(self) -> int:
        return sum(i.gpus for i in self.items)

    @property
    def usd_per_hour(self) -> Decimal:
        return sum((i.usd_per_hour for i in self.items), Decimal(0))

    def by(self, key: Literal["team", "node", "job_id"]) -> dict[str, tuple[int, Decimal, Decimal]]:
        """GPUs, $/h and $ so far per team, node or job."""
        out: dict[str, tuple[int, Decimal, Decimal]] = {}
        for i in self.items:
            k = str(getattr(i, key))
            g, h, s = out.get(k, (0, Decimal(0), Decimal(0)))
            out[k] = (g + i.gpus, h + i.usd_per_hour, s + i.usd_so_far)
        return dict(sorted(out.items()))


def gpu_waste(
    store: GpuReads,
    policy: Policy,
    now_ts: float,
    max_age_s: float = DEFAULT_MAX_AGE_S,
    node: str | None = None,
) -> WasteReport:
    """Allocated-but-idle GPUs on every node with fresh telemetry (see `WasteItem`)."""
    threshold = policy.guardrails.nvml_idle_util_pct
    mem = policy.health.idle_mem_used_mib
    payloads, silent = latest_payloads(store, now_ts, max_age_s, node)
    burst_price: dict[str, Decimal] = {}
    for si in store.instances(live_only=True):
        inst = si.instance
        if inst.node_name:
            burst_price[inst.node_name] = inst.price_usd_hr / max(inst.gpus, 1)
    running: dict[str, list[JobUsage]] = {}
    if payloads:
        for u in store.job_usage(overlapping=(now_ts, now_ts)):
            if u.node_name in payloads:
                running.setdefault(u.node_name, []).append(u)
    items: list[WasteItem] = []
    for name in sorted(payloads):
        p = payloads[name]
        if name in burst_price:
            kind, price = NodeKind.BURST, burst_price[name]
        else:
            kind, price = NodeKind.ONPREM, policy.onprem.amortized_usd_per_gpu_hour
        items += _node_waste(p, running.get(name, []), kind, price, policy, threshold, mem)
    return WasteReport(tuple(items), dict(sorted(silent.items())), threshold, mem)


def _node_waste(
    p: NodePayload,
    usages: Iterable[JobUsage],
    kind: NodeKind,
    price: Decimal,
    policy: Policy,
    threshold: float,
    mem: float | None,
) -> list[WasteItem]:
    t = p.telemetry
    now = t.sampled_ts
    jobs: dict[str, JobUsage] = {}
    for u in sorted(usages, key=lambda u: u.start_ts):
        jobs[u.job_id] = u  # the latest stint of a job on this node
    mapped: dict[int, set[str]] = {}
    for g in t.gpus:
        mapped.setdefault(g.index, set()).update(g.jobs)
    for jg in t.jobs:
        mapped.setdefault(jg.gpu_index, set()).add(jg.job_id)
    idle = {g.index: (not g.mig_enabled) and gpu_idle(g, threshold, mem) is True for g in t.gpus}

    def item(
        u: JobUsage | None,
        job_id: str,
        basis: WasteBasis,
        gpus: int,
        since: float,
        *,
        gpu: GpuReading | None = None,
        team: str | None = None,
        candidate_jobs: tuple[str, ...] = (),
    ) -> WasteItem:
        start = max(since, u.start_ts) if u is not None else since
        if team is None:
            team = (u.team or policy.budgets.team_for(u.account)) if u is not None else ""
        return WasteItem(
            node=t.node,
            node_kind=kind,
            gpus=gpus,
            basis=basis,
            gpu_index=gpu.index if gpu is not None else None,
            gpu_uuid=gpu.uuid if gpu is not None else "",
            job_id=job_id,
            team=team,
            account=u.account if u is not None else "",
            user=u.user if u is not None else "",
            partition=u.partition if u is not None else "",
            util_pct=gpu.util_pct if gpu is not None else None,
            mem_used_mib=gpu.mem_used_mib if gpu is not None else None,
            idle_since_ts=start,
            idle_s=max(0.0, now - start),
            usd_per_gpu_hour=price,
            candidate_jobs=candidate_jobs,
        )

    out: list[WasteItem] = []
    # 1. A job's process sits on an idle GPU.
    for g in sorted(t.gpus, key=lambda g: g.index):
        if not idle[g.index]:
            continue
        for job_id in sorted(mapped.get(g.index, ())):
            out.append(
                item(
                    jobs.get(job_id),
                    job_id,
                    "idle_with_process",
                    1,
                    p.idle_since.get(g.index, now),
                    gpu=g,
                )
            )
    # 2. GPUs a job holds with none of its processes on them: a lower bound from the idle GPUs
    # that no job is mapped to, counting every busy or unjudged one as somebody's allocation.
    unmapped = [g for g in t.gpus if not mapped.get(g.index)]
    idle_unmapped = [g for g in unmapped if idle[g.index]]
    busy = len(unmapped) - len(idle_unmapped)
    owed = {j: max(0, u.gpus - sum(1 for s in mapped.values() if j in s)) for j, u in jobs.items()}
    total = max(0, min(sum(owed.values()), len(unmapped)) - busy)
    if total <= 0:
        return out
    since = max(p.idle_since.get(g.index, now) for g in idle_unmapped)
    left = total
    for j in sorted(owed, key=lambda j: (-owed[j], j)):
        k = min(left, max(0, owed[j] - busy))
        if k > 0:
            out.append(item(jobs[j], j, "idle_unmapped", k, since))
            left -= k
    if left > 0:
        cands = tuple(sorted(j for j, n in owed.items() if n > 0))
        teams = {jobs[j].team or policy.budgets.team_for(jobs[j].account) for j in cands}
        latest = max((jobs[j].start_ts for j in cands), default=since)
        out.append(
            item(
                None,
                "",
                "idle_unmapped",
                left,
                max(since, latest),
                team=teams.pop() if len(teams) == 1 else "",
                candidate_jobs=cands,
            )
        )
    return out
