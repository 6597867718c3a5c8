"""Cost reports: ledger totals grouped by any of team, account, user, partition, cloud, region,
pool, kind, day, project (the account, by its FinOps name), node and slice (the part of a GPU a
job held: a MIG GRES type, `shard`, or "" for whole GPUs and rows of no job) over a [from, to)
window. The store answers the grouped totals (`LedgerStore.grouped_costs`); this module
validates the request and shapes the report.

Whole UTC days inside the window are read from the smallest rollup grain (`ledger_rollup`)
that holds every key asked for, the partial days at its edges from the ledger's covering window
index, and the two are merged (no rollup keeps the node or the slice: a report by either reads
the ledger). A ledger row belongs to the window when its start lies in it; rows never straddle
a midnight.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from provisioner.account.csv_safe import safe_row
from provisioner.domain.errors import InvalidArgument
from provisioner.domain.records import LedgerKind
from provisioner.ports.store import Ledger

GROUP_KEYS = (
    "team",
    "account",
    "user",
    "partition",
    "cloud",
    "region",
    "pool",
    "kind",
    "day",
    "project",
    "node",
    "slice",
)
# Keys that name a ledger column differently: a project is the Slurm account (as on the
# efficiency report), the node is the Slurm node a row was priced on, and the slice the part
# of a GPU its job held.
_COLUMN = {"project": "account", "node": "node_name", "slice": "gpu_part"}
KINDS = tuple(k.value for k in LedgerKind)


class ReportError(InvalidArgument):
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


def cost_report(
    store: Ledger,
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
    totals = store.grouped_costs([_COLUMN.get(k, k) for k in keys], from_ts, to_ts, kinds)
    rows = tuple(ReportRow(k, c, n) for k, (c, n) in sorted(totals.items()))
    return CostReport(keys, from_ts, to_ts, rows, kinds)


def report_to_csv(report: CostReport) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*report.group_by, "cost_usd", "ledger_rows"])
    for r in report.rows:
        w.writerow(safe_row([*r.key, f"{r.cost:.6f}", r.rows]))
    return buf.getvalue()
