"""The ledger rows behind a figure: the rows starting in [from, to) that match a set of filters,
with their count, dollars and quantities, so that every money figure on a page can link to the
rows it sums. Also the hourly buckets of a short window (a one-day chart by hour).

Filters, each optional: any cost-report key equal to a value (`team=vision`, `node=`, which is
the empty value: rows no node owns), `kind` as a comma-separated list, `unit` (e.g.
`GPU-Hours`), and `never_ran` (rows of cloud instances that ran no job in the window, the
Overview's waste definition, account/cloud_waste.py). The store filters and sums
(`Ledger.ledger_page`): only a page of rows reaches Python, whatever the window holds. The
hourly chart asks the store for each hour's grouped totals (`Ledger.grouped_costs`, a window of
two days at most), so it groups by any report key, those the export leaves out (the slice)
too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from provisioner.account.reports import GROUP_KEYS, ReportError, parse_kinds
from provisioner.domain.money import MICRO
from provisioner.domain.records import CLOUD_KINDS
from provisioner.ports.store import EXPORT_COLUMNS, Ledger, LedgerFilter

# The ledger column each filter key reads (a project is the Slurm account).
_COLUMN = {"project": "account", "node": "node_name", "slice": "gpu_part"}
EQUALITY_KEYS = tuple(k for k in GROUP_KEYS if k != "kind")
MAX_VALUE = 200
HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class LedgerQuery:
    from_ts: float
    to_ts: float
    equals: tuple[tuple[str, str], ...] = ()  # (filter key, value), in EQUALITY_KEYS order
    kinds: tuple[str, ...] = ()
    unit: str | None = None
    never_ran: bool = False

    def params(self) -> dict[str, str]:
        """The filters as query parameters (without the window)."""
        out = dict(self.equals)
        if self.kinds:
            out["kind"] = ",".join(self.kinds)
        if self.unit is not None:
            out["unit"] = self.unit
        if self.never_ran:
            out["never_ran"] = "1"
        return out


@dataclass(slots=True)
class LedgerSelection:
    """The matching rows from `offset` (at most `limit`, as dicts of EXPORT_COLUMNS) and the
    figures of all of them."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    count: int = 0
    cost_micros: int = 0
    quantity: dict[str, float] = field(default_factory=dict)  # per unit

    @property
    def cost(self) -> Decimal:
        return (Decimal(self.cost_micros) * MICRO).quantize(MICRO)


def parse_ledger_query(params: Mapping[str, str], from_ts: float, to_ts: float) -> LedgerQuery:
    """The filters in `params` (other parameters are ignored); a bad one is a ReportError."""
    if to_ts <= from_ts:
        raise ReportError("'to' must be after 'from'")
    equals = []
    for key in EQUALITY_KEYS:
        if key in params:
            value = params[key]
            if len(value) > MAX_VALUE:
                raise ReportError(f"{key}: longer than {MAX_VALUE} characters")
            equals.append((key, value))
    never = params.get("never_ran", "")
    if never not in ("", "0", "1"):
        raise ReportError(f"never_ran: {never[:20]!r} is not 1 or 0")
    unit = params.get("unit")
    if unit is not None and len(unit) > MAX_VALUE:
        raise ReportError(f"unit: longer than {MAX_VALUE} characters")
    return LedgerQuery(
        from_ts,
        to_ts,
        tuple(equals),
        parse_kinds(params.get("kind")),
        unit,
        never == "1",
    )


def _never_ran(store: Ledger, q: LedgerQuery) -> frozenset[str] | None:
    if not q.never_ran:
        return None
    costs = store.instance_costs(q.from_ts, q.to_ts, CLOUD_KINDS)
    return frozenset(iid for iid, (_, jobs) in costs.items() if jobs == 0)


def _filter(store: Ledger, q: LedgerQuery) -> LedgerFilter:
    return LedgerFilter(
        q.from_ts,
        q.to_ts,
        tuple((_COLUMN.get(k, k), v) for k, v in q.equals),
        q.kinds,
        q.unit,
        _never_ran(store, q),
    )


def select_rows(store: Ledger, q: LedgerQuery, offset: int = 0, limit: int = 50) -> LedgerSelection:
    """Every matching row counts towards the figures; rows [offset, offset + limit) are kept.
    The store filters and sums, so only the page's rows reach Python."""
    page = store.ledger_page(_filter(store, q), offset, limit)
    return LedgerSelection(
        [dict(zip(EXPORT_COLUMNS, row, strict=True)) for row in page.rows],
        page.count,
        page.cost_micros,
        page.quantity,
    )


def hourly(
    store: Ledger, key: str, from_ts: float, to_ts: float, kinds: Iterable[str] = ()
) -> dict[str, dict[float, Decimal]]:
    """Dollars per value of the cost-report `key` (or 'total' for 'day') per UTC hour
    (its start, as POSIX seconds) of the rows starting in the window. A row belongs to the
    hour its start lies in, as it belongs to the window its start lies in."""
    if key not in GROUP_KEYS:
        raise ReportError(f"group_by: unknown key {key[:40]!r}")
    wanted = parse_kinds(tuple(kinds))
    columns = [] if key == "day" else [_COLUMN.get(key, key)]
    out: dict[str, dict[float, Decimal]] = {}
    hour = from_ts // HOUR * HOUR
    while hour < to_ts:
        a, b = max(from_ts, hour), min(to_ts, hour + HOUR)
        for values, (cost, _) in store.grouped_costs(columns, a, b, wanted).items():
            out.setdefault(values[0] if values else "total", {})[hour] = cost
        hour += HOUR
    return out
