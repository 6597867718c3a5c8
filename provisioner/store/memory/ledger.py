"""`Ledger` in memory: job usage over a dict, ledger rows in a list (in insertion order)."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

from provisioner.domain.errors import InvalidArgument
from provisioner.domain.records import (
    BillingMark,
    JobUsage,
    LedgerEntry,
    LedgerKind,
    day_of,
    from_micros,
    to_micros,
)
from provisioner.ports.store import (
    EXPORT_COLUMNS,
    FILTER_COLUMNS,
    LEDGER_DIMENSIONS,
    ConcurrentUpdate,
    Ledger,
    LedgerFilter,
    LedgerPage,
    NotFound,
    StoreError,
)
from provisioner.store.ledger import MAX_ENTRY_MICROS

# The keys `grouped_costs` groups by: the SQL store's rollup columns, and the node and the
# part of a GPU (which only the ledger itself holds).
GROUP_KEYS = ("day", *LEDGER_DIMENSIONS, "node_name", "gpu_part")


class MemoryLedger(Ledger):
    """`Ledger` over a dict of usage records and a list of ledger rows (in insertion order).

    The instances whose billing watermarks `commit_billing` moves belong to the instance
    repository in the SQL store; here the ledger keeps them itself: `track_instance` adds one
    (unbilled), `instance_billing` reads its (billed until, billed seconds).

    Differences from SQL: an entry whose kind is not a `LedgerKind` is refused on write with
    `StoreError` (the SQL store keeps it and fails when reading it back); `grouped_costs` refuses
    a key outside `GROUP_KEYS` with `ValueError` whatever the window (the SQL store only when the
    window holds a whole UTC day; otherwise it groups by any ledger column); `ledger_export`
    yields lists of plain tuples, not SQLAlchemy rows. There are no rollups to rebuild."""

    def __init__(self) -> None:
        self._usage: dict[int, JobUsage] = {}
        self._usage_ids: dict[tuple[str, str, float], int] = {}
        self._next_usage_id = itertools.count(1)
        self._rows: list[LedgerEntry] = []
        self._instances: dict[str, tuple[float | None, float]] = {}

    # ------------------------------------------------------------------ instances billed

    def track_instance(self, instance_id: str) -> None:
        """An instance the ledger may bill, not billed yet (kept as it is if known)."""
        self._instances.setdefault(instance_id, (None, 0.0))

    def instance_billing(self, instance_id: str) -> tuple[float | None, float]:
        """(billed until, billed seconds) of a tracked instance; `NotFound` otherwise."""
        try:
            return self._instances[instance_id]
        except KeyError:
            raise NotFound(f"no instance {instance_id!r}") from None

    # ------------------------------------------------------------------ job usage

    def record_job_usage(self, usages: Iterable[JobUsage]) -> int:
        given = list(usages)
        for u in given:
            key = (u.job_id, u.node_name, u.start_ts)
            usage_id = self._usage_ids.get(key)
            if usage_id is None:
                usage_id = self._usage_ids[key] = next(self._next_usage_id)
                self._usage[usage_id] = replace(u, usage_id=usage_id, billed_until_ts=None)
            else:  # the id and the watermark stay
                old = self._usage[usage_id]
                self._usage[usage_id] = replace(
                    u, usage_id=usage_id, billed_until_ts=old.billed_until_ts
                )
        return len(given)

    def end_job(self, job_id: str, end_ts: float) -> int:
        open_ids = [i for i, u in self._usage.items() if u.job_id == job_id and u.end_ts is None]
        for i in open_ids:
            self._usage[i] = replace(self._usage[i], end_ts=end_ts)
        return len(open_ids)

    def job_usage(
        self,
        *,
        node_name: str | None = None,
        instance_id: str | None = None,
        onprem_only: bool = False,
        overlapping: tuple[float, float] | None = None,
        unbilled_at: float | None = None,
    ) -> list[JobUsage]:
        def keep(u: JobUsage) -> bool:
            if node_name is not None and u.node_name != node_name:
                return False
            if instance_id is not None and u.instance_id != instance_id:
                return False
            if onprem_only and u.instance_id != "":
                return False
            if overlapping is not None:
                a, b = overlapping
                if not (u.start_ts < b and (u.end_ts is None or u.end_ts > a)):
                    return False
            if unbilled_at is not None:
                billed, end = u.billed_until_ts, u.end_ts
                if not (
                    u.start_ts < unbilled_at and (billed is None or end is None or billed < end)
                ):
                    return False
            return True

        found = [u for u in self._usage.values() if keep(u)]
        return sorted(found, key=lambda u: (u.start_ts, u.usage_id or 0))

    # ------------------------------------------------------------------ ledger

    def add_ledger(self, entries: Iterable[LedgerEntry]) -> int:
        rows = [_checked(e) for e in entries]
        self._rows.extend(rows)
        return len(rows)

    def commit_billing(
        self,
        entries: Sequence[LedgerEntry],
        *,
        instance_marks: Sequence[BillingMark] = (),
        usage_marks: Sequence[BillingMark] = (),
    ) -> int:
        # Staged on copies, in the SQL store's order (instances, usage, rows): a mark or an
        # entry that fails leaves everything as it was.
        instances = dict(self._instances)
        for m in instance_marks:
            key = str(m.key)
            if key not in instances:
                raise NotFound(f"no instance {m.key!r}")
            until, seconds = instances[key]
            if until != m.expected:
                raise ConcurrentUpdate(f"instance {m.key}: billed_until moved")
            instances[key] = (m.until, seconds + m.add_seconds)
        usage = dict(self._usage)
        for m in usage_marks:
            u = usage.get(int(m.key))
            if u is None:
                raise NotFound(f"no job usage {m.key!r}")
            if u.billed_until_ts != m.expected:
                raise ConcurrentUpdate(f"job usage {m.key}: billed_until moved")
            usage[int(m.key)] = replace(u, billed_until_ts=m.until)
        rows = [_checked(e) for e in entries]
        self._instances, self._usage = instances, usage
        self._rows.extend(rows)
        return len(rows)

    def ledger_total(self, from_ts: float | None = None, to_ts: float | None = None) -> Decimal:
        return from_micros(sum(to_micros(e.cost) for e in self._window(from_ts, to_ts)))

    def grouped_costs(
        self, group_by: Sequence[str], from_ts: float, to_ts: float, kinds: Sequence[str] = ()
    ) -> dict[tuple[str, ...], tuple[Decimal, int]]:
        bad = [k for k in group_by if k not in GROUP_KEYS]
        if bad:
            raise InvalidArgument(f"cannot group the ledger by {bad}")
        wanted = {str(k) for k in kinds}
        totals: dict[tuple[str, ...], list[int]] = {}
        for e in self._window(from_ts, to_ts):
            if wanted and str(e.kind) not in wanted:
                continue
            acc = totals.setdefault(tuple(_text(e, k) for k in group_by), [0, 0])
            acc[0] += to_micros(e.cost)
            acc[1] += 1
        return {k: (from_micros(c), n) for k, (c, n) in totals.items()}

    def spend_by_team(
        self, from_ts: float, to_ts: float, kinds: Sequence[str]
    ) -> dict[str, Decimal]:
        first, last = day_of(from_ts), day_of(to_ts)
        wanted = {str(k) for k in kinds}
        spent: dict[str, int] = {}
        for e in self._rows:
            if first <= e.day < last and str(e.kind) in wanted:
                spent[e.team] = spent.get(e.team, 0) + to_micros(e.cost)
        return {team: from_micros(c) for team, c in spent.items()}

    def instance_costs(
        self, from_ts: float, to_ts: float, kinds: Sequence[str]
    ) -> dict[str, tuple[Decimal, Decimal]]:
        wanted = {str(k) for k in kinds}
        totals: dict[str, list[int]] = {}
        for e in self._rows:
            if e.instance_id and from_ts <= e.start_ts < to_ts and str(e.kind) in wanted:
                t = totals.setdefault(e.instance_id, [0, 0])
                t[0] += to_micros(e.cost)
                if e.kind is LedgerKind.JOB:
                    t[1] += to_micros(e.cost)
        return {iid: (from_micros(a), from_micros(b)) for iid, (a, b) in totals.items()}

    def ledger_page(self, f: LedgerFilter, offset: int = 0, limit: int = 50) -> LedgerPage:
        bad = [c for c, _ in f.equals if c not in FILTER_COLUMNS]
        if bad:
            raise InvalidArgument(f"ledger filter: {bad[0][:40]!r} is not a filter column")
        kinds = {str(k) for k in f.kinds}
        out = LedgerPage()
        for e in self._window(f.from_ts, f.to_ts):
            if (
                (kinds and str(e.kind) not in kinds)
                or (f.unit is not None and e.unit != f.unit)
                or (f.instance_ids is not None and e.instance_id not in f.instance_ids)
                or any(_text(e, c) != v for c, v in f.equals)
            ):
                continue
            if offset <= out.count < offset + limit:
                out.rows.append(tuple(_column(e, c) for c in EXPORT_COLUMNS))
            out.count += 1
            out.cost_micros += to_micros(e.cost)
            out.quantity[e.unit] = out.quantity.get(e.unit, 0.0) + e.quantity
        return out

    def ledger_export(
        self, from_ts: float | None = None, to_ts: float | None = None, *, chunk_rows: int = 2000
    ) -> Iterator[Sequence[Sequence[Any]]]:
        rows = [tuple(_column(e, c) for c in EXPORT_COLUMNS) for e in self._window(from_ts, to_ts)]
        for start in range(0, len(rows), chunk_rows):
            yield rows[start : start + chunk_rows]

    def ledger_entries(
        self, *, instance_id: str | None = None, job_id: str | None = None
    ) -> list[LedgerEntry]:
        return [
            e
            for e in self._sorted(self._rows)
            if (instance_id is None or e.instance_id == instance_id)
            and (job_id is None or e.job_id == job_id)
        ]

    def job_costs(self, job_ids: Collection[str]) -> dict[str, Decimal]:
        wanted = {j for j in job_ids if j}
        out: dict[str, Decimal] = {}
        for e in self._rows:
            if e.job_id in wanted:
                out[e.job_id] = out.get(e.job_id, Decimal(0)) + e.cost
        return out

    def _window(self, from_ts: float | None, to_ts: float | None) -> list[LedgerEntry]:
        """Rows starting in [from_ts, to_ts), in start order, then insertion order."""
        return self._sorted(
            e
            for e in self._rows
            if (from_ts is None or e.start_ts >= from_ts) and (to_ts is None or e.start_ts < to_ts)
        )

    @staticmethod
    def _sorted(rows: Iterable[LedgerEntry]) -> list[LedgerEntry]:
        return sorted(rows, key=lambda e: e.start_ts)  # stable: ties keep insertion order


def _checked(e: LedgerEntry) -> LedgerEntry:
    """The entry as the SQL store keeps it, or `StoreError` for one it refuses."""
    if e.end_ts < e.start_ts:
        raise StoreError(f"ledger entry ends before it starts ({e.start_ts}, {e.end_ts})")
    if day_of(e.start_ts) != day_of(max(e.start_ts, e.end_ts - 1e-6)):
        raise StoreError("a ledger entry must not straddle a UTC midnight")
    micros, unit_micros = to_micros(e.cost), to_micros(e.unit_price)
    if abs(micros) > MAX_ENTRY_MICROS or abs(unit_micros) > MAX_ENTRY_MICROS:
        raise StoreError(
            f"ledger entry {e.kind} {e.node_name or e.instance_id} costs {e.cost} "
            f"(unit price {e.unit_price}): over the ${MAX_ENTRY_MICROS // 10**6:,} a row may hold"
        )
    try:
        kind = LedgerKind(str(e.kind))
    except ValueError:
        raise StoreError(f"ledger entry of unknown kind {e.kind!r}") from None
    return replace(
        e,
        kind=kind,
        cost=from_micros(micros),
        unit_price=from_micros(unit_micros),
        quantity=float(e.quantity),
    )


def _text(e: LedgerEntry, key: str) -> str:
    return e.day if key == "day" else str(getattr(e, key))


def _column(e: LedgerEntry, column: str) -> Any:
    """One value of an export row, as the SQL store's column holds it."""
    if column == "day":
        return e.day
    if column == "kind":
        return e.kind.value
    if column == "cost_micros":
        return to_micros(e.cost)
    if column == "unit_price_micros":
        return to_micros(e.unit_price)
    return getattr(e, column)
