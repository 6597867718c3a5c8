"""Energy cost of on-prem GPUs, from NVML telemetry, into the ledger (kind `energy`).

Each pass, for every on-prem GPU with a stored sample newer than its watermark (the last sample
already billed, table `gpu_energy_marks`):

- kWh between the two samples: the energy counter's delta, or mean power x time when the counter
  is missing, went backwards (driver reload, GPU reset) or implies an implausible power
  (`gpu_telemetry.gpu_energy_kwh`; a genuine 64-bit wrap is handled there);
- x `onprem.energy_usd_per_kwh`, as Decimal to the micro-dollar, cut at UTC midnights and split
  over the jobs on the node by GPU-seconds (`allocation.allocate_energy`; what no job used stays
  an energy row with no job);
- the ledger rows and the moved watermarks are written in one transaction, compare-and-set on
  the watermark, so running it twice over the same samples bills nothing the second time and
  two controllers never bill the same window.

The first sample of a GPU only sets its watermark. A window the counter cannot measure and that
is longer than `max_power_gap_s` (the agent was away; power at its two ends says little about
the time between) is skipped, not guessed; so is any window longer than the policy's
`telemetry.max_energy_gap_s`, one that starts in a closed billing period (a month before the
current one, once `PERIOD_CLOSE_GRACE_S` of the new month has passed), and one whose samples lie
outside 1970-2286. No GPU is believed to draw more than its model's board power
(`power_bound_w`, from the Slurm GPU type and the catalog's board power table) or, for a node
not given there, `telemetry.max_power_w`: no row holds more than that power for that gap. A
window worth less than a micro-dollar keeps its watermark, so it is billed with the next one
instead of being rounded away.

Burst nodes are not billed here: the cloud's price includes their power. Nodes are taken as
on-prem unless a stored cloud instance carries their name, or pass `onprem_nodes`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from provisioner.account.allocation import allocate_energy
from provisioner.account.billing import MAX_TS, day_windows, month_start
from provisioner.account.pricing import energy_usd_per_kwh
from provisioner.config.models import Policy
from provisioner.domain.nodes import GpuSample
from provisioner.domain.records import EnergyMark, LedgerEntry, NodeTelemetry
from provisioner.domain.telemetry import energy_cost_usd, gpu_energy_kwh
from provisioner.ports.store import ConcurrentUpdate, InstanceRepo, Ledger, TelemetryRepo


class EnergyStore(TelemetryRepo, InstanceRepo, Ledger, Protocol):
    """What energy billing reads and writes: telemetry and its marks, the burst instances
    (not billed here), the jobs running on each node, and the ledger."""


DEFAULT_MAX_POWER_GAP_S = 3600.0
# A month's books close once the new month is this old: energy windows starting before then
# are never billed (late samples cannot rewrite a period finance has already pulled).
PERIOD_CLOSE_GRACE_S = 86_400.0


@dataclass(frozen=True, slots=True)
class EnergyResult:
    rows: int = 0
    cost: Decimal = Decimal(0)
    kwh: Decimal = Decimal(0)
    billed_gpus: int = 0  # GPU windows priced into the ledger
    baselines: int = 0  # GPUs seen for the first time: watermark set, nothing billed
    skipped: int = 0  # windows that could not be measured: watermark moved, nothing billed
    held: int = 0  # windows worth under a micro-dollar: kept for the next pass
    conflicts: int = 0  # nodes another writer billed first: nothing written for them

    def __add__(self, o: EnergyResult) -> EnergyResult:
        return EnergyResult(
            self.rows + o.rows,
            self.cost + o.cost,
            self.kwh + o.kwh,
            self.billed_gpus + o.billed_gpus,
            self.baselines + o.baselines,
            self.skipped + o.skipped,
            self.held + o.held,
            self.conflicts + o.conflicts,
        )


def gpu_key(sample: GpuSample) -> str:
    """The watermark key of a GPU: its UUID (stable across index changes), else '#<index>'."""
    return sample.uuid or f"#{sample.index}"


def _mark(node: str, g: GpuSample) -> EnergyMark:
    return EnergyMark(node, gpu_key(g), g.sampled_ts, g.energy_mj, g.power_w)


def _as_reading(m: EnergyMark, g: GpuSample) -> GpuSample:
    return GpuSample(
        index=g.index,
        uuid=g.uuid,
        util_pct=0.0,
        power_w=m.power_w,
        energy_mj=m.energy_mj,
        sampled_ts=m.sampled_ts,
    )


def burst_node_names(store: InstanceRepo) -> set[str]:
    return {si.instance.node_name for si in store.instances() if si.instance.node_name}


def bill_energy(
    store: EnergyStore,
    policy: Policy,
    now_ts: float,
    *,
    onprem_nodes: Collection[str] | None = None,
    max_power_gap_s: float = DEFAULT_MAX_POWER_GAP_S,
    power_bound_w: Mapping[str, float] | None = None,
) -> EnergyResult:
    """Bill the energy every on-prem GPU used since its watermark (see the module docstring).
    Samples stamped after `now_ts` wait for a later pass. `power_bound_w`: the most one GPU of
    each node can draw (W); a node not named there is bounded by `telemetry.max_power_w`."""
    burst = burst_node_names(store) if onprem_nodes is None else set()
    result = EnergyResult()
    closed_before = month_start(now_ts - PERIOD_CLOSE_GRACE_S)
    for nt in store.telemetry():
        if onprem_nodes is not None and nt.node not in onprem_nodes:
            continue
        if nt.node in burst:
            continue
        bound = (power_bound_w or {}).get(nt.node, policy.telemetry.max_power_w)
        result = result + _bill_node(
            store,
            policy,
            nt,
            now_ts,
            min(bound, policy.telemetry.max_power_w),
            max_power_gap_s,
            closed_before,
        )
    return result


def _billable(prev: EnergyMark, cur: GpuSample, closed_before: float) -> bool:
    return (
        prev.sampled_ts >= closed_before
        and 0 <= prev.sampled_ts < MAX_TS
        and 0 <= cur.sampled_ts < MAX_TS
    )


def _bill_node(
    store: EnergyStore,
    policy: Policy,
    nt: NodeTelemetry,
    now_ts: float,
    max_power_w: float,
    max_power_gap_s: float,
    closed_before: float,
) -> EnergyResult:
    limits = policy.telemetry
    marks = store.energy_marks(nt.node)
    moves: list[tuple[EnergyMark | None, EnergyMark]] = []
    windows: dict[tuple[float, float], list[tuple[Decimal, EnergyMark, EnergyMark]]] = {}
    baselines = skipped = held = billed = 0
    for g in nt.gpus:
        if g.sampled_ts > now_ts:
            continue
        prev = marks.get((nt.node, gpu_key(g)))
        cur = _mark(nt.node, g)
        if prev is None:
            moves.append((None, cur))
            baselines += 1
            continue
        elapsed = g.sampled_ts - prev.sampled_ts
        if elapsed <= 0:
            continue
        if elapsed > limits.max_energy_gap_s or not _billable(prev, g, closed_before):
            moves.append((prev, cur))
            skipped += 1
            continue
        est = gpu_energy_kwh(_as_reading(prev, g), g, elapsed, max_plausible_w=max_power_w)
        if est.method == "none" or (est.method == "power" and elapsed > max_power_gap_s):
            moves.append((prev, cur))
            skipped += 1
            continue
        windows.setdefault((prev.sampled_ts, g.sampled_ts), []).append(
            (Decimal(repr(est.kwh)), prev, cur)
        )
    price = energy_usd_per_kwh(policy)
    entries: list[LedgerEntry] = []
    kwh_total = Decimal(0)
    for (a, b), gpus in sorted(windows.items()):
        kwh = sum((k for k, _, _ in gpus), Decimal(0))
        if kwh > 0 and energy_cost_usd(kwh, price) == 0:
            held += len(gpus)
            continue
        moves.extend((prev, cur) for _, prev, cur in gpus)
        billed += len(gpus)
        kwh_total += kwh
        entries += _entries(store, policy, nt, a, b, kwh, price)
    if not moves:
        return EnergyResult(held=held)
    try:
        n = store.commit_energy(entries, moves, now_ts)
    except ConcurrentUpdate:
        return EnergyResult(conflicts=1)
    cost = sum((e.cost for e in entries), Decimal(0))
    return EnergyResult(n, cost, kwh_total, billed, baselines, skipped, held)


def _entries(
    store: EnergyStore,
    policy: Policy,
    nt: NodeTelemetry,
    a: float,
    b: float,
    kwh: Decimal,
    price: Decimal,
) -> list[LedgerEntry]:
    if kwh <= 0:
        return []
    usages = store.job_usage(node_name=nt.node, overlapping=(a, b))
    span = Decimal(repr(b - a))
    out: list[LedgerEntry] = []
    for wa, wb in day_windows(a, b):
        part = kwh * Decimal(repr(wb - wa)) / span
        out += allocate_energy(
            nt.node,
            wa,
            wb,
            part,
            price,
            usages,
            node_gpus=len(nt.gpus),
            pool="onprem",
            team_for=policy.budgets.team_for,
        )
    return out


__all__ = ["DEFAULT_MAX_POWER_GAP_S", "EnergyResult", "bill_energy", "burst_node_names", "gpu_key"]
