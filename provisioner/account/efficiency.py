"""GPU efficiency and waste per team, project, pool or node over a window, the way FinOps tools
show them (docs/console.md, "Efficiency and waste", maps each figure to Kubecost's, OpenCost's
and FOCUS's terms):

- GPU-hours paid: the ledger's GPU-hour rows (cloud job, idle, unbound and orphan time; on-prem
  GPU-hours allocated to jobs) starting in the window.
- GPU-hours used, from NVML (domain/gpu_usage.py), in two senses: utilisation-weighted
  (util% × hours) and busy (hours with a process on the GPU), over the hours starting in the
  window (to the hour).
- Efficiency: used over paid, each sense.
- Idle dollars: the ledger's `idle` rows (a node in Slurm with GPUs no job used).
- Never-ran dollars: every cloud dollar of an instance that ran no job in the window, the
  definition of the Overview's waste share (account/cloud_waste.py).

Project is the Slurm account. A GPU-hour row is keyed by its own team, account, pool and node;
used time by the job tagged on the GPU (its team and account from the jobs table) and by the
node (its pool from the window's ledger rows). Time no job was tagged on is nobody's: it counts
for its node and pool, and for team and project "" (shown as "(unattributed)").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

from provisioner.account.reports import ReportError
from provisioner.domain.gpu_usage import hour_of
from provisioner.domain.job_records import JobRecord
from provisioner.domain.money import MICRO
from provisioner.domain.records import CLOUD_KINDS
from provisioner.ports.store import GpuUsageLog, JobHistory, Ledger

DIMENSIONS = ("team", "project", "pool", "node")
GPU_HOURS = "GPU-Hours"
_HOUR = 3600.0


class EfficiencyReads(Ledger, GpuUsageLog, JobHistory, Protocol):
    """What the report reads: the ledger's rows and per-instance costs, the hourly GPU usage,
    and the jobs table (a job's team and project)."""


@dataclass
class Efficiency:
    """One group's figures (hours as floats, dollars as exact Decimals)."""

    key: str
    gpu_hours_paid: float = 0.0
    gpu_hours_used_util: float = 0.0
    gpu_hours_used_busy: float = 0.0
    gpu_hours_observed: float = 0.0
    cost_usd: Decimal = field(default_factory=lambda: Decimal(0))
    idle_usd: Decimal = field(default_factory=lambda: Decimal(0))
    never_ran_usd: Decimal = field(default_factory=lambda: Decimal(0))

    @property
    def efficiency_util(self) -> float | None:
        return self.gpu_hours_used_util / self.gpu_hours_paid if self.gpu_hours_paid else None

    @property
    def efficiency_busy(self) -> float | None:
        return self.gpu_hours_used_busy / self.gpu_hours_paid if self.gpu_hours_paid else None

    def add(self, other: Efficiency) -> None:
        self.gpu_hours_paid += other.gpu_hours_paid
        self.gpu_hours_used_util += other.gpu_hours_used_util
        self.gpu_hours_used_busy += other.gpu_hours_used_busy
        self.gpu_hours_observed += other.gpu_hours_observed
        self.cost_usd += other.cost_usd
        self.idle_usd += other.idle_usd
        self.never_ran_usd += other.never_ran_usd


def parse_dimension(text: str | None) -> str:
    key = (text or "team").strip().lower()
    if key not in DIMENSIONS:
        raise ReportError(f"group_by: {key[:40]!r} is not one of {', '.join(DIMENSIONS)}")
    return key


def efficiency(
    store: EfficiencyReads, group_by: str, from_ts: float, to_ts: float
) -> tuple[list[Efficiency], Efficiency]:
    """The groups (largest paid GPU-hours first, then by name) and their total."""
    if to_ts <= from_ts:
        raise ReportError("'to' must be after 'from'")
    key = parse_dimension(group_by)
    never_ran = {
        iid for iid, (_, jobs) in store.instance_costs(from_ts, to_ts, CLOUD_KINDS).items()
        if jobs == 0
    }  # fmt: skip
    groups: dict[str, Efficiency] = {}
    pools: dict[str, str] = {}

    def group(value: str) -> Efficiency:
        return groups.setdefault(value, Efficiency(value))

    for part in store.ledger_export(from_ts, to_ts):
        for row in part:
            _add_ledger_row(row, key, never_ran, pools, group)
    _add_usage(store, key, from_ts, to_ts, pools, group)
    rows = sorted(groups.values(), key=lambda e: (-e.gpu_hours_paid, e.key))
    total = Efficiency("total")
    for e in rows:
        total.add(e)
    return rows, total


def _add_ledger_row(
    row: Sequence[Any], key: str, never_ran: set[str], pools: dict[str, str], group: Any
) -> None:
    kind, pool, instance_id, node = row[3], row[6], row[7], row[8]
    team, account, quantity, unit, cost_micros = row[13], row[14], row[18], row[19], row[21]
    if node:
        pools.setdefault(node, pool)
    value = {"team": team, "project": account, "pool": pool, "node": node}[key]
    e: Efficiency = group(value)
    cost = (Decimal(int(cost_micros)) * MICRO).quantize(MICRO)
    e.cost_usd += cost
    if unit == GPU_HOURS:
        e.gpu_hours_paid += float(quantity)
    if str(kind) == "idle":
        e.idle_usd += cost
    if instance_id and instance_id in never_ran:
        e.never_ran_usd += cost


def _add_usage(
    store: EfficiencyReads,
    key: str,
    from_ts: float,
    to_ts: float,
    pools: dict[str, str],
    group: Any,
) -> None:
    usage = store.gpu_usage(hour_of(from_ts), to_ts)
    if not usage:
        return
    jobs: dict[str, JobRecord] = {}
    if key in ("team", "project"):
        # the jobs alive in the window (and an hour before it, for its first partial hour)
        alive = store.job_records(since=hour_of(from_ts), until=to_ts)
        jobs = {r.job_id: r for r in alive}
    for u in usage:
        rec = jobs.get(u.job_id)
        value = {
            "team": rec.team if rec else "",
            "project": rec.account if rec else "",
            "pool": pools.get(u.node, ""),
            "node": u.node,
        }[key]
        e: Efficiency = group(value)
        e.gpu_hours_used_util += u.util_s / _HOUR
        e.gpu_hours_used_busy += u.busy_s / _HOUR
        e.gpu_hours_observed += u.observed_s / _HOUR


def efficiency_dict(e: Efficiency) -> dict[str, Any]:
    def ratio(v: float | None) -> float | None:
        return round(v, 4) if v is not None else None

    return {
        "key": e.key,
        "gpu_hours_paid": round(e.gpu_hours_paid, 6),
        "gpu_hours_used_util": round(e.gpu_hours_used_util, 6),
        "gpu_hours_used_busy": round(e.gpu_hours_used_busy, 6),
        "gpu_hours_observed": round(e.gpu_hours_observed, 6),
        "efficiency_util": ratio(e.efficiency_util),
        "efficiency_busy": ratio(e.efficiency_busy),
        "cost_usd": f"{e.cost_usd:.6f}",
        "idle_usd": f"{e.idle_usd:.6f}",
        "never_ran_usd": f"{e.never_ran_usd:.6f}",
    }


def efficiency_rows(rows: Iterable[Efficiency]) -> list[dict[str, Any]]:
    return [efficiency_dict(e) for e in rows]
