"""The console's ledger page: the rows a money figure sums (account/ledger_query.py), paged,
with their total, so that each number in a Costs or Budgets table links to its own rows."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from provisioner.account.known import check_team, window_outside_ledger
from provisioner.account.ledger_query import parse_ledger_query, select_rows
from provisioner.api import render
from provisioner.api.console.paging import Page, cut
from provisioner.api.console.views import now_ts, window
from provisioner.api.deps import ApiDeps
from provisioner.domain.money import MICRO


def ledger_page(deps: ApiDeps, q: Mapping[str, str], page: Page) -> dict[str, Any]:
    f, t = window(deps, q.get("from"), q.get("to"))
    query = parse_ledger_query(q, f, t)
    sel = select_rows(deps.store, query, page.offset, page.fetch)
    if not sel.count:
        check_team(deps.store, q.get("team"), now_ts(deps))
    shown, pager = cut(sel.rows, page, "ledger rows")
    rows = [
        {
            "kind": str(r["kind"]),
            "start": render.iso(float(r["start_ts"])),
            "end": render.iso(float(r["end_ts"])),
            "node": r["node_name"],
            "instance_id": r["instance_id"],
            "pool": r["pool"],
            "job_id": r["job_id"],
            "team": r["team"],
            "account": r["account"],
            "quantity": round(float(r["quantity"] or 0.0), 6),
            "unit": r["unit"],
            "cost_usd": f"{(Decimal(int(r['cost_micros'])) * MICRO).quantize(MICRO):.6f}",
        }
        for r in shown
    ]
    return {
        "notice": window_outside_ledger(deps.store, f, t, now_ts(deps)),
        "from": render.iso(f),
        "to": render.iso(t),
        "filters": sorted(query.params().items()),
        "rows": rows,
        "pager": pager,
        "count": sel.count,
        "total_usd": f"{sel.cost:.6f}",
        "quantities": [(u, round(v, 6)) for u, v in sorted(sel.quantity.items()) if u],
    }
