"""Cost reports: ledger totals grouped by any of team, account, user, partition, cloud, region,
pool, kind and day over a [from, to) window, computed in SQL.

Whole UTC days inside the window are read from the smallest rollup grain (`ledger_rollup`)
that holds every key asked for, the partial days at its edges from the ledger's covering window
index, and the two are merged. A
ledger row belongs to the window when its start lies in it; rows never straddle a midnight.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import ColumnElement, Select, func, select

from provisioner.account.billing import DAY_S
from provisioner.account.csv_safe import safe_row
from provisioner.store import Store, day_of, from_micros
from provisioner.store.models import GRAINS, LedgerRow, RollupRow

GROUP_KEYS = ("team", "account", "user", "partition", "cloud", "region", "pool", "kind", "day")
KINDS = ("job", "idle", "unbound", "orphan", "onprem", "energy")


class ReportError(ValueError):
    """A report was asked for with bad parameters (the message says which)."""


@dataclass(frozen=True, slots=True)
class ReportRow:
    key: tuple[str, ...]
    cost: Decimal
    rows: int


@dataclass(frozen=True, slots=True)
class CostReport:
    group_by: tuple[str, ...]
    from_ts: float
    to_ts: float
    rows: tuple[ReportRow, ...]
    kinds: tuple[str, ...] = ()

    @property
    def total(self) -> Decimal:
        return sum((r.cost for r in self.rows), Decimal(0))

    @property
    def ledger_rows(self) -> int:
        return sum(r.rows for r in self.rows)


def parse_group_by(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """'team,day' -> ('team', 'day'); unknown or repeated keys are a ReportError."""
    if text is None:
        return ()
    parts = text.split(",") if isinstance(text, str) else list(text)
    keys = tuple(p.strip().lower() for p in parts if p.strip())
    bad = [k for k in keys if k not in GROUP_KEYS]
    if bad:
        raise ReportError(
            f"group_by: unknown key(s) {', '.join(map(repr, bad))}; use any of "
            + ", ".join(GROUP_KEYS)
        )
    if len(set(keys)) != len(keys):
        raise ReportError("group_by: a key is repeated")
    return keys


def parse_kinds(text: str | Sequence[str] | None) -> tuple[str, ...]:
    if text is None:
        return ()
    parts = text.split(",") if isinstance(text, str) else list(text)
    kinds = tuple(dict.fromkeys(p.strip().lower() for p in parts if p.strip()))
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise ReportError(
            f"kind: unknown kind(s) {', '.join(map(repr, bad))}; use any of " + ", ".join(KINDS)
        )
    return kinds


def pick_grain(group_by: Sequence[str], kinds: Sequence[str] = ()) -> int:
    """The rollup grain with the fewest dimensions that still holds every key needed."""
    need = {k for k in group_by if k != "day"} | ({"kind"} if kinds else set())
    fits = [g for g, dims in enumerate(GRAINS) if need <= set(dims)]
    return min(fits, key=lambda g: (len(GRAINS[g]), g))


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
        q = q.where(model.kind.in_(list(kinds)))
    if cols:
        q = q.group_by(*cols)
    return q


def cost_report(
    store: Store,
    group_by: Sequence[str],
    from_ts: float,
    to_ts: float,
    *,
    kinds: Sequence[str] = (),
) -> CostReport:
    """Totals of the ledger rows starting in [from_ts, to_ts), grouped by `group_by`."""
    keys = parse_group_by(group_by)
    kinds = parse_kinds(kinds)
    if not to_ts > from_ts:
        raise ReportError("'to' must be after 'from'")
    first_full = -(-from_ts // DAY_S) * DAY_S  # the first midnight at or after from
    last_full = (to_ts // DAY_S) * DAY_S  # the last midnight at or before to
    queries: list[Select[Any]] = []
    if first_full < last_full:
        queries.append(
            _grouped(
                RollupRow,
                keys,
                [
                    RollupRow.grain == pick_grain(keys, kinds),
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
            queries.append(
                _grouped(LedgerRow, keys, [LedgerRow.start_ts >= a, LedgerRow.start_ts < b], kinds)
            )
    totals: dict[tuple[str, ...], list[int]] = {}
    n = len(keys)
    with store.reading() as s:
        for q in queries:
            for row in s.execute(q):
                micros, count = row[n], row[n + 1]
                if count is None or int(count) == 0:
                    continue
                key = tuple(str(v) for v in row[:n])
                acc = totals.setdefault(key, [0, 0])
                acc[0] += int(micros or 0)
                acc[1] += int(count)
    rows = tuple(ReportRow(k, from_micros(c), n_) for k, (c, n_) in sorted(totals.items()))
    return CostReport(keys, from_ts, to_ts, rows, kinds)


def report_to_csv(report: CostReport) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*report.group_by, "cost_usd", "ledger_rows"])
    for r in report.rows:
        w.writerow(safe_row([*r.key, f"{r.cost:.6f}", r.rows]))
    return buf.getvalue()
