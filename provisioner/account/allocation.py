"""Cost allocation: pure functions from (an instance window, the jobs on it) to ledger entries.

An instance window costs price × seconds. Each job that ran on the node in the window pays
the share of that cost its GPU-seconds are of the node's GPU-seconds; what no job used stays
visible as an `idle` row charged to the pool and to the team whose demand triggered the node.
Job shares are rounded down to the micro-dollar and the leftover micro-dollars go to the jobs
with the largest remainders, so job rows + idle row == window cost exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from decimal import ROUND_DOWN, ROUND_HALF_EVEN, Decimal
from typing import TypedDict

from provisioner.account.billing import unused_kind
from provisioner.domain.money import MICRO, cost_for_seconds
from provisioner.domain.records import JobUsage, LedgerEntry, LedgerKind, StoredInstance

HOUR = Decimal(3600)


@dataclass(frozen=True, slots=True)
class Share:
    """One claimant on a window's cost: `weight` GPU-seconds."""

    usage: JobUsage
    weight: float


def overlap(a: float, b: float, start: float, end: float | None) -> float:
    return max(0.0, min(b, end if end is not None else b) - max(a, start))


def shares_of(usages: Sequence[JobUsage], a: float, b: float, gpus: int) -> list[Share]:
    """Each usage's GPU-seconds in [a, b) on a node of `gpus` GPUs, parts of GPUs at their share
    of a GPU (a slice is priced at its part of the node, never below); usages with none left
    out."""
    shares = [
        Share(u, min(u.gpu_weight, gpus) * overlap(a, b, u.start_ts, u.end_ts)) for u in usages
    ]
    return [s for s in shares if s.weight > 0]


class JobFields(TypedDict):
    job_id: str
    team: str
    account: str
    user: str
    partition: str
    gpu_part: str


def job_fields(u: JobUsage, team_for: Callable[[str], str]) -> JobFields:
    """The ledger fields naming `u`'s job (and the part of a GPU it held, so a report can
    group by it); the team falls back to the account's."""
    return {
        "job_id": u.job_id,
        "team": u.team or team_for(u.account),
        "account": u.account,
        "user": u.user,
        "partition": u.partition,
        "gpu_part": u.gpu_part,
    }


def split_cost(total: Decimal, weights: Sequence[float], capacity: float) -> list[Decimal]:
    """Split `total` by `weights` out of `capacity` (weights summing past capacity are scaled
    down to it). Returns one amount per weight; the rest of `total` is the idle remainder."""
    if not weights or total == 0:
        return [Decimal(0)] * len(weights)
    used = sum(weights)
    denom = Decimal(repr(max(capacity, used)))
    if denom <= 0:
        return [Decimal(0)] * len(weights)
    exact = [total * Decimal(repr(w)) / denom for w in weights]
    floors = [x.quantize(MICRO, rounding=ROUND_DOWN) for x in exact]
    target = sum(exact, Decimal(0)).quantize(MICRO, rounding=ROUND_HALF_EVEN)
    target = min(target, total)
    leftover = int(((target - sum(floors, Decimal(0))) / MICRO).to_integral_value())
    order = sorted(range(len(weights)), key=lambda i: (floors[i] - exact[i], i))
    for i in order[: max(0, leftover)]:
        floors[i] += MICRO
    return floors


def allocate_instance_window(
    si: StoredInstance,
    a: float,
    b: float,
    usages: Sequence[JobUsage],
    *,
    team_for: Callable[[str], str] = lambda account: account,
    extra_seconds: float = 0.0,
) -> list[LedgerEntry]:
    """Ledger rows for instance `si` over [a, b): job rows by GPU-seconds, plus the idle rest.

    `extra_seconds` is billed time with no usage (the 60 s minimum top-up): it is all idle.
    """
    inst = si.instance
    seconds = max(0.0, b - a)
    billed = seconds + extra_seconds
    if billed <= 0:
        return []
    price = inst.price_usd_hr
    gpus = max(inst.gpus, 1)
    gpu_price = price / gpus
    total = cost_for_seconds(price, billed)
    base = LedgerEntry(
        start_ts=a,
        end_ts=b,
        kind=LedgerKind.IDLE,
        cost=Decimal(0),
        cloud=inst.offer.cloud,
        region=inst.offer.region,
        pool=inst.pool,
        instance_id=inst.instance_id,
        node_name=inst.node_name,
        offer=str(inst.offer),
        instance_type=inst.offer.instance_type,
        capacity=str(inst.offer.capacity),
        decision_id=inst.decision_id,
        unit="GPU-Hours",
        unit_price=gpu_price,
    )
    shares = shares_of(usages, a, b, gpus)
    capacity = gpus * billed
    amounts = split_cost(total, [s.weight for s in shares], capacity)
    out: list[LedgerEntry] = []
    for s, amount in zip(shares, amounts, strict=True):
        u = s.usage
        out.append(
            replace(
                base,
                start_ts=max(a, u.start_ts),
                end_ts=min(b, u.end_ts if u.end_ts is not None else b),
                kind=LedgerKind.JOB,
                cost=amount,
                **job_fields(u, team_for),
                gpus=min(u.gpus, gpus),
                quantity=s.weight / 3600.0,
            )
        )
    idle = total - sum(amounts, Decimal(0))
    used = min(sum(s.weight for s in shares), capacity)
    if idle > 0 or not shares:
        out.append(
            replace(
                base,
                kind=unused_kind(inst, b),
                cost=idle,
                team=si.team,
                gpus=gpus,
                quantity=(capacity - used) / 3600.0,
            )
        )
    return out


def allocate_onprem(
    usage: JobUsage,
    a: float,
    b: float,
    usd_per_gpu_hour: Decimal,
    *,
    team_for: Callable[[str], str] = lambda account: account,
) -> LedgerEntry | None:
    """On-prem: amortised $/GPU-h × the job's GPU-seconds in [a, b), parts of GPUs at their
    share of a GPU."""
    secs = overlap(a, b, usage.start_ts, usage.end_ts)
    if secs <= 0 or usage.gpu_weight <= 0:
        return None
    gpu_seconds = usage.gpu_weight * secs
    held = usage.gpus + Decimal(repr(usage.part_gpus))
    return LedgerEntry(
        start_ts=max(a, usage.start_ts),
        end_ts=min(b, usage.end_ts if usage.end_ts is not None else b),
        kind=LedgerKind.ONPREM,
        cost=cost_for_seconds(usd_per_gpu_hour * held, secs),
        pool=usage.pool or "onprem",
        node_name=usage.node_name,
        **job_fields(usage, team_for),
        gpus=usage.gpus,
        quantity=gpu_seconds / 3600.0,
        unit="GPU-Hours",
        unit_price=usd_per_gpu_hour,
    )


def allocate_energy(
    node_name: str,
    a: float,
    b: float,
    kwh: Decimal,
    usd_per_kwh: Decimal,
    usages: Sequence[JobUsage],
    *,
    node_gpus: int,
    pool: str = "onprem",
    team_for: Callable[[str], str] = lambda account: account,
) -> list[LedgerEntry]:
    """Energy a node drew over [a, b) (kWh, from NVML), priced and split over the jobs on it by
    GPU-seconds; the rest is an energy row with no job."""
    total = (kwh * usd_per_kwh).quantize(MICRO, rounding=ROUND_HALF_EVEN)
    if total <= 0:
        return []
    shares = shares_of(usages, a, b, node_gpus)
    capacity = max(node_gpus, 1) * max(b - a, 0.0)
    amounts = split_cost(total, [s.weight for s in shares], capacity)
    base = LedgerEntry(
        start_ts=a,
        end_ts=b,
        kind=LedgerKind.ENERGY,
        cost=Decimal(0),
        pool=pool,
        node_name=node_name,
        unit="kWh",
        unit_price=usd_per_kwh,
    )
    out: list[LedgerEntry] = []
    for s, amount in zip(shares, amounts, strict=True):
        u = s.usage
        frac = float(amount / total) if total else 0.0
        out.append(
            replace(
                base,
                cost=amount,
                **job_fields(u, team_for),
                gpus=u.gpus,
                quantity=float(kwh) * frac,
            )
        )
    rest = total - sum(amounts, Decimal(0))
    if rest > 0:
        frac = float(rest / total)
        out.append(replace(base, cost=rest, gpus=node_gpus, quantity=float(kwh) * frac))
    return out
