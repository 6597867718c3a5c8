"""The console's drill-down pages: one job (where it ran, what it cost, the decisions that
placed it) and one instance (its lifecycle, its bill, the jobs it ran). Each lists the ledger
rows its dollars sum, and links on: team -> jobs -> a job -> its instance -> that instance's
jobs, and back."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from provisioner.api import render
from provisioner.api.deps import ApiDeps
from provisioner.api.jobs_view import job_dicts
from provisioner.domain.errors import NotKnown
from provisioner.domain.records import LedgerEntry


class PageNotFound(NotKnown):
    """A job or instance the store does not hold (never seen, or pruned)."""


def _ledger_rows(entries: list[LedgerEntry]) -> tuple[list[dict[str, Any]], str]:
    rows = [
        {
            "kind": str(e.kind),
            "start": render.iso(e.start_ts),
            "end": render.iso(e.end_ts),
            "node": e.node_name,
            "instance_id": e.instance_id,
            "job_id": e.job_id,
            "team": e.team,
            "quantity": round(e.quantity, 6),
            "unit": e.unit,
            "cost_usd": f"{e.cost:.6f}",
        }
        for e in entries
    ]
    return rows, f"{sum((e.cost for e in entries), Decimal(0)):.6f}"


def job_page(deps: ApiDeps, job_id: str) -> dict[str, Any]:
    rec = deps.store.job_record(job_id)
    if rec is None:
        raise PageNotFound(f"job {job_id[:128]!r}: no such job in the jobs table (never seen, or "
                           "older than its retention)")  # fmt: skip
    (job,) = job_dicts(deps.store, [rec])
    rows, total = _ledger_rows(deps.store.ledger_entries(job_id=job_id))
    return {"job": job, "ledger": rows, "ledger_total_usd": total}


def instance_page(deps: ApiDeps, instance_id: str) -> dict[str, Any]:
    si = deps.store.instance(instance_id)
    if si is None:
        raise PageNotFound(f"instance {instance_id[:128]!r}: no such instance in the store")
    inst = render.instance_dict(si)
    rows, total = _ledger_rows(deps.store.ledger_entries(instance_id=instance_id))
    ran = deps.store.job_records(ran_on=instance_id, limit=200)
    billed = si.instance.price_usd_hr * Decimal(repr(si.billed_seconds)) / 3600
    return {
        "instance": inst,
        "history": [
            {
                "to": str(t.to_state),
                "at": render.iso(t.at_ts),
                "reason": t.reason,
                "cloud_at": render.iso(t.cloud_ts) if t.cloud_ts is not None else None,
            }
            for t in si.instance.history
        ],
        "billed_usd": f"{billed:.6f}",
        "ledger": rows,
        "ledger_total_usd": total,
        "jobs": [{"job_id": r.job_id, "team": r.team, "state": r.state} for r in ran],
    }
