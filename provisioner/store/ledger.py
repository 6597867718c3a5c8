"""Job usage, the ledger and its rollups. Ledger rows, their rollups and the accounting
watermarks they move are written in one transaction, so no half-written ledger survives a crash.
The behaviour each method promises is written on its port, `provisioner.ports.store.Ledger`."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any

from sqlalchemy import ColumnElement, Select, case, func, literal, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

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
from provisioner.store.engine import StoreBase
from provisioner.store.models import (
    GRAINS,
    InstanceRow,
    JobUsageRow,
    LedgerRow,
    RollupRow,
    _table,
)

# One ledger row never holds more than $10M (or a unit price over that). Costs are summed as
# 64-bit integer micro-dollars; with this bound it takes 900,000 maximal rows in one day and
# group before a SUM could overflow, so a forged or broken input cannot make every report fail.
MAX_ENTRY_MICROS = 10**13

DAY_S = 86_400


def pick_grain(group_by: Sequence[str], kinds: Sequence[str] = ()) -> int | None:
    """The rollup grain with the fewest dimensions that still holds every key needed; None
    when none does (the node, the GPU part: the rollups leave them out, the ledger answers)."""
    need = {k for k in group_by if k != "day"} | ({"kind"} if kinds else set())
    fits = [g for g, dims in enumerate(GRAINS) if need <= set(dims)]
    return min(fits, key=lambda g: (len(GRAINS[g]), g)) if fits else None


def _grouped(
    model: type[LedgerRow] | type[RollupRow],
    group_by: Sequence[str],
    where: Iterable[ColumnElement[bool]],
    kinds: Sequence[str],
) -> Select[Any]:
    cols = [getattr(model, k) for k in group_by]
    count = func.count() if model is LedgerRow else func.sum(RollupRow.rows)
    q = select(*cols, func.sum(model.cost_micros), count).where(*where)
    if kinds:
        q = q.where(model.kind.in_([str(k) for k in kinds]))
    if cols:
        q = q.group_by(*cols)
    return q


class LedgerStore(StoreBase, Ledger):
    # ------------------------------------------------------------------ job usage

    def record_job_usage(self, usages: Iterable[JobUsage]) -> int:
        n = 0
        with self.fenced_transaction() as s:
            for u in usages:
                row = s.scalars(
                    select(JobUsageRow).where(
                        JobUsageRow.job_id == u.job_id,
                        JobUsageRow.node_name == u.node_name,
                        JobUsageRow.start_ts == u.start_ts,
                    )
                ).first()
                if row is None:
                    row = JobUsageRow(job_id=u.job_id, node_name=u.node_name, start_ts=u.start_ts)
                    s.add(row)
                row.gpus = u.gpus
                row.part_gpus = u.part_gpus
                row.gpu_part = u.gpu_part
                row.end_ts = u.end_ts
                row.instance_id = u.instance_id
                row.pool = u.pool
                row.account = u.account
                row.team = u.team
                row.partition = u.partition
                row.user = u.user
                n += 1
        return n

    def end_job(self, job_id: str, end_ts: float) -> int:
        with self.fenced_transaction() as s:
            res = s.execute(
                update(JobUsageRow)
                .where(JobUsageRow.job_id == job_id, JobUsageRow.end_ts.is_(None))
                .values(end_ts=end_ts)
            )
            return int(getattr(res, "rowcount", 0) or 0)

    def job_usage(
        self,
        *,
        node_name: str | None = None,
        instance_id: str | None = None,
        onprem_only: bool = False,
        overlapping: tuple[float, float] | None = None,
        unbilled_at: float | None = None,
    ) -> list[JobUsage]:
        q = select(JobUsageRow)
        if node_name is not None:
            q = q.where(JobUsageRow.node_name == node_name)
        if instance_id is not None:
            q = q.where(JobUsageRow.instance_id == instance_id)
        if onprem_only:
            q = q.where(JobUsageRow.instance_id == "")
        if overlapping is not None:
            a, b = overlapping
            q = q.where(
                JobUsageRow.start_ts < b,
                (JobUsageRow.end_ts.is_(None)) | (JobUsageRow.end_ts > a),
            )
        if unbilled_at is not None:
            q = q.where(
                JobUsageRow.start_ts < unbilled_at,
                JobUsageRow.billed_until_ts.is_(None)
                | JobUsageRow.end_ts.is_(None)
                | (JobUsageRow.billed_until_ts < JobUsageRow.end_ts),
            )
        q = q.order_by(JobUsageRow.start_ts, JobUsageRow.id)
        with self.reading() as s:
            return [_usage(r) for r in s.scalars(q)]

    # ------------------------------------------------------------------ ledger

    def add_ledger(self, entries: Iterable[LedgerEntry]) -> int:
        with self.fenced_transaction() as s:
            return self._insert_ledger(s, entries)

    def commit_billing(
        self,
        entries: Sequence[LedgerEntry],
        *,
        instance_marks: Sequence[BillingMark] = (),
        usage_marks: Sequence[BillingMark] = (),
    ) -> int:
        # One transaction: the watermarks, locked, then the ledger rows (and their rollups).
        with self.fenced_transaction() as s:
            for m in instance_marks:
                inst = s.get(InstanceRow, str(m.key), with_for_update=True)
                if inst is None:
                    raise NotFound(f"no instance {m.key!r}")
                if inst.billed_until_ts != m.expected:
                    raise ConcurrentUpdate(f"instance {m.key}: billed_until moved")
                inst.billed_until_ts = m.until
                inst.billed_seconds = (inst.billed_seconds or 0.0) + m.add_seconds
            for m in usage_marks:
                usage = s.get(JobUsageRow, int(m.key), with_for_update=True)
                if usage is None:
                    raise NotFound(f"no job usage {m.key!r}")
                if usage.billed_until_ts != m.expected:
                    raise ConcurrentUpdate(f"job usage {m.key}: billed_until moved")
                usage.billed_until_ts = m.until
            return self._insert_ledger(s, entries)

    def _insert_ledger(self, s: Session, entries: Iterable[LedgerEntry]) -> int:
        rows: list[dict[str, Any]] = []
        totals: dict[tuple[str, ...], list[int]] = {}
        for e in entries:
            if e.end_ts < e.start_ts:
                raise StoreError(f"ledger entry ends before it starts ({e.start_ts}, {e.end_ts})")
            if day_of(e.start_ts) != day_of(max(e.start_ts, e.end_ts - 1e-6)):
                raise StoreError("a ledger entry must not straddle a UTC midnight")
            micros = to_micros(e.cost)
            if abs(micros) > MAX_ENTRY_MICROS or abs(to_micros(e.unit_price)) > MAX_ENTRY_MICROS:
                raise StoreError(
                    f"ledger entry {e.kind} {e.node_name or e.instance_id} costs {e.cost} "
                    f"(unit price {e.unit_price}): over the ${MAX_ENTRY_MICROS // 10**6:,} a "
                    "row may hold"
                )
            day = e.day
            rows.append(
                {
                    "start_ts": e.start_ts,
                    "end_ts": e.end_ts,
                    "day": day,
                    "kind": str(e.kind),  # the enum's string, whatever the driver does with enums
                    "cloud": e.cloud,
                    "region": e.region,
                    "pool": e.pool,
                    "instance_id": e.instance_id,
                    "node_name": e.node_name,
                    "offer": e.offer,
                    "instance_type": e.instance_type,
                    "capacity": e.capacity,
                    "job_id": e.job_id,
                    "team": e.team,
                    "account": e.account,
                    "user": e.user,
                    "partition": e.partition,
                    "decision_id": e.decision_id,
                    "gpus": e.gpus,
                    "quantity": e.quantity,
                    "unit": e.unit,
                    "unit_price_micros": to_micros(e.unit_price),
                    "cost_micros": micros,
                    "gpu_part": e.gpu_part,
                }
            )
            dims = {d: str(getattr(e, d)) for d in LEDGER_DIMENSIONS}
            for grain, keep in enumerate(GRAINS):
                key = (str(grain), day, *(dims[d] if d in keep else "" for d in LEDGER_DIMENSIONS))
                acc = totals.setdefault(key, [0, 0])
                acc[0] += micros
                acc[1] += 1
        if not rows:
            return 0
        s.execute(_table(LedgerRow).insert(), rows)
        self._add_rollups(s, totals)
        return len(rows)

    def _add_rollups(self, s: Session, totals: Mapping[tuple[str, ...], list[int]]) -> None:
        cols = ("grain", "day", *LEDGER_DIMENSIONS)
        values = [
            {
                **dict(zip(cols, key, strict=True)),
                "grain": int(key[0]),
                "cost_micros": c,
                "rows": n,
            }
            for key, (c, n) in totals.items()
        ]
        table = _table(RollupRow)
        if self.dialect in ("sqlite", "postgresql"):
            ins = (sqlite.insert if self.dialect == "sqlite" else postgresql.insert)(table)
            stmt = ins.on_conflict_do_update(
                index_elements=list(cols),
                set_={
                    "cost_micros": table.c.cost_micros + ins.excluded.cost_micros,
                    "rows": table.c.rows + ins.excluded.rows,
                },
            )
            for start in range(0, len(values), 500):
                s.execute(stmt, values[start : start + 500])
            return
        for v in values:  # pragma: no cover - other dialects: read, then write
            where = [table.c[c] == v[c] for c in cols]
            res = s.execute(
                update(table)
                .where(*where)
                .values(
                    cost_micros=table.c.cost_micros + v["cost_micros"],
                    rows=table.c.rows + v["rows"],
                )
            )
            if not getattr(res, "rowcount", 0):
                s.execute(table.insert(), [v])

    def rebuild_rollups(self) -> None:
        """Recompute every rollup from the ledger (a repair tool; normally maintained)."""
        led = _table(LedgerRow)
        rollup = _table(RollupRow)
        with self.transaction() as s:
            s.execute(rollup.delete())
            for grain, keep in enumerate(GRAINS):
                kept = [led.c[d] for d in LEDGER_DIMENSIONS if d in keep]
                out = [led.c[d] if d in keep else literal("").label(d) for d in LEDGER_DIMENSIONS]
                s.execute(
                    rollup.insert().from_select(
                        ["grain", "day", *LEDGER_DIMENSIONS, "cost_micros", "rows"],
                        select(
                            literal(grain).label("grain"),
                            led.c.day,
                            *out,
                            func.sum(led.c.cost_micros),
                            func.count(),
                        ).group_by(led.c.day, *kept),
                    )
                )

    def ledger_total(self, from_ts: float | None = None, to_ts: float | None = None) -> Decimal:
        q = select(func.coalesce(func.sum(LedgerRow.cost_micros), 0))
        if from_ts is not None:
            q = q.where(LedgerRow.start_ts >= from_ts)
        if to_ts is not None:
            q = q.where(LedgerRow.start_ts < to_ts)
        with self.reading() as s:
            return from_micros(int(s.execute(q).scalar_one()))

    def grouped_costs(
        self, group_by: Sequence[str], from_ts: float, to_ts: float, kinds: Sequence[str] = ()
    ) -> dict[tuple[str, ...], tuple[Decimal, int]]:
        """Whole UTC days inside the window are read from the smallest rollup grain that holds
        every key asked for, the partial days at its edges from the ledger's covering window
        index, and the two are merged. Rows never straddle a midnight. No rollup keeps the
        node or the GPU part, so a report by either reads the ledger over the whole window."""
        first_full = -(-from_ts // DAY_S) * DAY_S  # the first midnight at or after from
        last_full = (to_ts // DAY_S) * DAY_S  # the last midnight at or before to
        grain = pick_grain(group_by, kinds)
        queries: list[Select[Any]] = []
        if grain is None:
            edges = [(from_ts, to_ts)]
        elif first_full < last_full:
            queries.append(
                _grouped(
                    RollupRow,
                    group_by,
                    [
                        RollupRow.grain == grain,
                        RollupRow.day >= day_of(first_full),
                        RollupRow.day < day_of(last_full),
                    ],
                    kinds,
                )
            )
            edges = [(from_ts, first_full), (last_full, to_ts)]
        else:
            edges = [(from_ts, to_ts)]
        for a, b in edges:
            if b > a:
                where = [LedgerRow.start_ts >= a, LedgerRow.start_ts < b]
                queries.append(_grouped(LedgerRow, group_by, where, kinds))
        totals: dict[tuple[str, ...], list[int]] = {}
        n = len(group_by)
        with self.reading() as s:
            for q in queries:
                for row in s.execute(q):
                    micros, count = row[n], row[n + 1]
                    if count is None or int(count) == 0:
                        continue
                    acc = totals.setdefault(tuple(str(v) for v in row[:n]), [0, 0])
                    acc[0] += int(micros or 0)
                    acc[1] += int(count)
        return {k: (from_micros(c), rows) for k, (c, rows) in totals.items()}

    def spend_by_team(
        self, from_ts: float, to_ts: float, kinds: Sequence[str]
    ) -> dict[str, Decimal]:
        """Read from the (kind, team) rollup, which answers whole days exactly."""
        q = (
            select(RollupRow.team, func.sum(RollupRow.cost_micros))
            .where(
                RollupRow.grain == GRAINS.index(("kind", "team")),
                RollupRow.day >= day_of(from_ts),
                RollupRow.day < day_of(to_ts),
                RollupRow.kind.in_([str(k) for k in kinds]),
            )
            .group_by(RollupRow.team)
        )
        with self.reading() as s:
            return {str(t): from_micros(int(c or 0)) for t, c in s.execute(q)}

    def instance_costs(
        self, from_ts: float, to_ts: float, kinds: Sequence[str]
    ) -> dict[str, tuple[Decimal, Decimal]]:
        job = func.sum(
            case((LedgerRow.kind == str(LedgerKind.JOB), LedgerRow.cost_micros), else_=0)
        )
        q = (
            select(LedgerRow.instance_id, func.sum(LedgerRow.cost_micros), job)
            .where(
                LedgerRow.instance_id != "",
                LedgerRow.start_ts >= from_ts,
                LedgerRow.start_ts < to_ts,
                LedgerRow.kind.in_([str(k) for k in kinds]),
            )
            .group_by(LedgerRow.instance_id)
        )
        with self.reading() as s:
            return {
                str(iid): (from_micros(int(total or 0)), from_micros(int(jobs or 0)))
                for iid, total, jobs in s.execute(q)
            }

    def ledger_export(
        self, from_ts: float | None = None, to_ts: float | None = None, *, chunk_rows: int = 2000
    ) -> Iterator[Sequence[Sequence[Any]]]:
        """The rows stream from the database in batches of `chunk_rows`, so memory stays flat
        whatever the ledger's size."""
        q = select(*(getattr(LedgerRow, c) for c in EXPORT_COLUMNS))
        if from_ts is not None:
            q = q.where(LedgerRow.start_ts >= from_ts)
        if to_ts is not None:
            q = q.where(LedgerRow.start_ts < to_ts)
        q = q.order_by(LedgerRow.start_ts, LedgerRow.id)
        with self.engine.connect() as conn:
            result = conn.execution_options(yield_per=chunk_rows).execute(q)
            yield from result.partitions()

    def ledger_page(self, f: LedgerFilter, offset: int = 0, limit: int = 50) -> LedgerPage:
        """Two queries over the window's index range: the figures per unit, then one page."""
        if f.instance_ids is not None and not f.instance_ids:
            return LedgerPage()
        where = [LedgerRow.start_ts >= f.from_ts, LedgerRow.start_ts < f.to_ts]
        for column, value in f.equals:
            if column not in FILTER_COLUMNS:
                raise InvalidArgument(f"ledger filter: {column[:40]!r} is not a filter column")
            where.append(getattr(LedgerRow, column) == value)
        if f.kinds:
            where.append(LedgerRow.kind.in_([str(k) for k in f.kinds]))
        if f.unit is not None:
            where.append(LedgerRow.unit == f.unit)
        if f.instance_ids is not None:
            where.append(LedgerRow.instance_id.in_(sorted(f.instance_ids)))
        sums = (
            select(
                LedgerRow.unit,
                func.count(),
                func.sum(LedgerRow.cost_micros),
                func.sum(LedgerRow.quantity),
            )
            .where(*where)
            .group_by(LedgerRow.unit)
        )
        rows = (
            select(*(getattr(LedgerRow, c) for c in EXPORT_COLUMNS))
            .where(*where)
            .order_by(LedgerRow.start_ts, LedgerRow.id)
            .offset(offset)
            .limit(limit)
        )
        out = LedgerPage()
        with self.reading() as s:
            for unit, n, micros, qty in s.execute(sums):
                out.count += int(n)
                out.cost_micros += int(micros or 0)
                out.quantity[str(unit or "")] = float(qty or 0.0)
            if out.count > offset:
                out.rows = [tuple(r) for r in s.execute(rows)]
        return out

    def ledger_entries(
        self, *, instance_id: str | None = None, job_id: str | None = None
    ) -> list[LedgerEntry]:
        q = select(LedgerRow)
        if instance_id is not None:
            q = q.where(LedgerRow.instance_id == instance_id)
        if job_id is not None:
            q = q.where(LedgerRow.job_id == job_id)
        with self.reading() as s:
            return [_entry(r) for r in s.scalars(q.order_by(LedgerRow.start_ts, LedgerRow.id))]

    def job_costs(self, job_ids: Collection[str]) -> dict[str, Decimal]:
        wanted = sorted({j for j in job_ids if j})
        out: dict[str, Decimal] = {}
        with self.reading() as s:
            for i in range(0, len(wanted), 500):  # bounded IN lists
                q = (
                    select(LedgerRow.job_id, func.sum(LedgerRow.cost_micros))
                    .where(LedgerRow.job_id.in_(wanted[i : i + 500]))
                    .group_by(LedgerRow.job_id)
                )
                for job_id, micros in s.execute(q):
                    out[str(job_id)] = Decimal(int(micros)).scaleb(-6)
        return out


# --------------------------------------------------------------------------- row <-> record


def _usage(r: JobUsageRow) -> JobUsage:
    return JobUsage(
        job_id=r.job_id,
        node_name=r.node_name,
        gpus=r.gpus,
        start_ts=r.start_ts,
        end_ts=r.end_ts,
        instance_id=r.instance_id,
        pool=r.pool,
        account=r.account,
        team=r.team,
        partition=r.partition,
        user=r.user,
        usage_id=r.id,
        billed_until_ts=r.billed_until_ts,
        part_gpus=r.part_gpus or 0.0,
        gpu_part=r.gpu_part or "",
    )


def _entry(r: LedgerRow) -> LedgerEntry:
    return LedgerEntry(
        start_ts=r.start_ts,
        end_ts=r.end_ts,
        kind=LedgerKind(r.kind),
        cost=from_micros(r.cost_micros),
        cloud=r.cloud,
        region=r.region,
        pool=r.pool,
        instance_id=r.instance_id,
        node_name=r.node_name,
        offer=r.offer,
        instance_type=r.instance_type,
        capacity=r.capacity,
        job_id=r.job_id,
        team=r.team,
        account=r.account,
        user=r.user,
        partition=r.partition,
        decision_id=r.decision_id,
        gpus=r.gpus,
        quantity=r.quantity,
        unit=r.unit,
        unit_price=from_micros(r.unit_price_micros),
        gpu_part=r.gpu_part or "",
    )
