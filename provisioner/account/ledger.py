"""The accountant: turns instance lifetimes and job usage into ledger rows, incrementally.

Each instance and each on-prem usage record carries a watermark (`billed_until_ts`); a run
bills the time between the watermark and now (or the instance's end), cut at UTC midnights,
and moves the watermark in the same transaction as the rows it writes. Running it twice at the
same `now` writes nothing the second time; a crash between runs loses nothing.

Job usage must be recorded before the time it covers is billed: usage that arrives after its
window was billed has already been counted as idle (`settle_s` delays billing to allow for it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from itertools import pairwise
from typing import Protocol

from provisioner.account.allocation import (
    allocate_energy,
    allocate_instance_window,
    allocate_onprem,
)
from provisioner.account.billing import (
    MIN_BILLED_SECONDS,
    billing_start,
    day_windows,
    unbound_until,
)
from provisioner.account.pricing import energy_usd_per_kwh, onprem_usd_per_gpu_hour
from provisioner.config.models import Policy
from provisioner.domain.records import BillingMark, LedgerEntry, StoredInstance
from provisioner.ports.store import InstanceRepo, Ledger


class BillingStore(InstanceRepo, Ledger, Protocol):
    """What the accountant reads and writes: the instances billed, job usage, the ledger."""


@dataclass(frozen=True, slots=True)
class AccountingResult:
    rows: int = 0
    cost: Decimal = Decimal(0)
    instances: int = 0
    usages: int = 0

    def __add__(self, other: AccountingResult) -> AccountingResult:
        return AccountingResult(
            self.rows + other.rows,
            self.cost + other.cost,
            self.instances + other.instances,
            self.usages + other.usages,
        )


@dataclass(frozen=True, slots=True)
class InstanceBill:
    entries: tuple[LedgerEntry, ...]
    mark: BillingMark


def billing_window(
    si: StoredInstance, now_ts: float, *, settle_s: float = 0.0, hold_at: float | None = None
) -> tuple[float, float, float] | None:
    """The window to bill for `si` at `now_ts`: (from, to, minimum top-up seconds), or None.
    `hold_at`: a live record whose VM the clouds no longer list is billed no further than when
    it was first missed, until its record is closed (or the VM is listed again)."""
    inst = si.instance
    start = billing_start(inst)
    if start is None:
        return None
    if inst.state.terminal:
        end_run = si.ended_ts if si.ended_ts is not None else inst.entered_state_ts
        end_run = max(end_run, start)
        horizon = min(end_run, now_ts)
    else:
        end_run = None
        horizon = now_ts - settle_s
        if hold_at is not None:
            horizon = min(horizon, hold_at)
    a = si.billed_until_ts if si.billed_until_ts is not None else start
    b = max(a, horizon)
    final = end_run is not None and b >= end_run
    run_so_far = si.billed_seconds + (b - a)
    extra = MIN_BILLED_SECONDS - run_so_far if final and run_so_far < MIN_BILLED_SECONDS else 0.0
    if b <= a and extra <= 0:
        return None
    return a, b, extra


class Accountant:
    def __init__(self, store: BillingStore, policy: Policy, *, settle_s: float = 0.0) -> None:
        self.store = store
        self.policy = policy
        self.settle_s = settle_s

    def _team_for(self, account: str) -> str:
        return self.policy.budgets.team_for(account)

    def run(self, now_ts: float, missing: Mapping[str, float] | None = None) -> AccountingResult:
        return self.bill_instances(now_ts, missing) + self.bill_onprem(now_ts)

    def instance_bill(
        self, si: StoredInstance, now_ts: float, hold_at: float | None = None
    ) -> InstanceBill | None:
        window = billing_window(si, now_ts, settle_s=self.settle_s, hold_at=hold_at)
        if window is None:
            return None
        a, b, extra = window
        inst = si.instance
        usages = (
            self.store.job_usage(instance_id=inst.instance_id, overlapping=(a, b)) if b > a else []
        )
        entries: list[LedgerEntry] = []
        bound = unbound_until(inst)
        for wa, wb in day_windows(a, b):
            # cut at the binding too: time before it is `unbound`, after it `idle`
            cuts = [wa, bound, wb] if wa < bound < wb else [wa, wb]
            for ca, cb in pairwise(cuts):
                entries += allocate_instance_window(si, ca, cb, usages, team_for=self._team_for)
        if extra > 0:
            entries += allocate_instance_window(si, b, b, [], extra_seconds=extra)
        mark = BillingMark(inst.instance_id, si.billed_until_ts, b, (b - a) + extra)
        return InstanceBill(tuple(entries), mark)

    def bill_instances(
        self, now_ts: float, missing: Mapping[str, float] | None = None
    ) -> AccountingResult:
        """`missing`: instance id -> when a complete listing first lacked it (see
        `billing_window`)."""
        result = AccountingResult()
        gone = missing or {}
        for si in self.store.instances(needs_billing=True):
            bill = self.instance_bill(si, now_ts, gone.get(si.instance.instance_id))
            if bill is None:
                if si.instance.state.terminal and si.billed_until_ts is None:
                    # Ended without ever running: nothing to bill, ever. Close its books.
                    end = si.ended_ts if si.ended_ts is not None else si.instance.entered_state_ts
                    mark = BillingMark(si.instance.instance_id, None, end, 0.0)
                    self.store.commit_billing([], instance_marks=[mark])
                continue
            n = self.store.commit_billing(bill.entries, instance_marks=[bill.mark])
            cost = sum((e.cost for e in bill.entries), Decimal(0))
            result = result + AccountingResult(n, cost, 1, 0)
        return result

    def bill_onprem(self, now_ts: float, batch: int = 500) -> AccountingResult:
        price = onprem_usd_per_gpu_hour(self.policy)
        result = AccountingResult()
        entries: list[LedgerEntry] = []
        marks: list[BillingMark] = []
        for u in self.store.job_usage(onprem_only=True, unbilled_at=now_ts):
            a = u.billed_until_ts if u.billed_until_ts is not None else u.start_ts
            b = min(u.end_ts if u.end_ts is not None else now_ts, now_ts)
            if b <= a:
                continue
            for wa, wb in day_windows(a, b):
                e = allocate_onprem(u, wa, wb, price, team_for=self._team_for)
                if e is not None:
                    entries.append(e)
            assert u.usage_id is not None
            marks.append(BillingMark(u.usage_id, u.billed_until_ts, b))
            if len(marks) >= batch:
                result = result + self._commit_onprem(entries, marks)
                entries, marks = [], []
        if marks:
            result = result + self._commit_onprem(entries, marks)
        return result

    def _commit_onprem(
        self, entries: list[LedgerEntry], marks: list[BillingMark]
    ) -> AccountingResult:
        n = self.store.commit_billing(entries, usage_marks=marks)
        return AccountingResult(n, sum((e.cost for e in entries), Decimal(0)), 0, len(marks))

    def bill_energy(
        self,
        node_name: str,
        start_ts: float,
        end_ts: float,
        kwh: Decimal,
        *,
        node_gpus: int,
        pool: str = "onprem",
    ) -> AccountingResult:
        """Energy a node drew over [start, end), measured by NVML: kWh × $/kWh, split over the
        jobs on the node by GPU-seconds (prorated by time across UTC days)."""
        if end_ts <= start_ts or kwh <= 0:
            return AccountingResult()
        usages = self.store.job_usage(node_name=node_name, overlapping=(start_ts, end_ts))
        span = Decimal(repr(end_ts - start_ts))
        entries: list[LedgerEntry] = []
        for wa, wb in day_windows(start_ts, end_ts):
            part = kwh * Decimal(repr(wb - wa)) / span
            entries += allocate_energy(
                node_name,
                wa,
                wb,
                part,
                energy_usd_per_kwh(self.policy),
                usages,
                node_gpus=node_gpus,
                pool=pool,
                team_for=self._team_for,
            )
        n = self.store.add_ledger(entries)
        return AccountingResult(n, sum((e.cost for e in entries), Decimal(0)), 0, 0)
