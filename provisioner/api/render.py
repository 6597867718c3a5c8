"""JSON renderings of store records for the API. Times as ISO 8601 UTC (plus POSIX seconds
where a machine wants to compute with them); money as decimal strings, never floats."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from provisioner.account.budgets import BudgetStatus
from provisioner.account.reports import CostReport
from provisioner.domain.plan import Plan
from provisioner.domain.records import (
    Intent,
    NodeTelemetry,
    OperatorState,
    PoolInfo,
    StoredDecision,
    StoredInstance,
)
from provisioner.plan.explain import decision_to_dict, plan_to_dict


def iso(ts: float | None) -> str | None:
    if ts is None or not math.isfinite(ts):
        return None
    try:
        text = datetime.fromtimestamp(ts, UTC).isoformat()
    except (OverflowError, OSError, ValueError):
        return None
    return text.replace("+00:00", "Z")


def dec(v: Decimal | None) -> str | None:
    return None if v is None else str(v)


def pool_dict(
    p: PoolInfo, *, instances: int = 0, usd_per_hour: Decimal | None = None
) -> dict[str, Any]:
    return {
        "name": p.name,
        "cloud": p.cloud,
        "regions": list(p.regions),
        "partition": p.partition,
        "team": p.team,
        "gpu_model": p.gpu_model,
        "capacity": p.capacity,
        "max_nodes": p.max_nodes,
        "drained": p.drained,
        "drained_at": iso(p.drained_ts),
        "drained_by": p.drained_by or None,
        "live_instances": instances,
        "usd_per_hour": dec(usd_per_hour if usd_per_hour is not None else Decimal(0)),
    }


def instance_dict(si: StoredInstance, *, history: bool = True) -> dict[str, Any]:
    i = si.instance
    out: dict[str, Any] = {
        "instance_id": i.instance_id,
        "pool": i.pool,
        "offer": str(i.offer),
        "cloud": i.offer.cloud,
        "region": i.offer.region,
        "instance_type": i.offer.instance_type,
        "capacity": str(i.offer.capacity),
        "gpu_model": i.gpu_model,
        "gpus": i.gpus,
        "price_usd_hr": dec(i.price_usd_hr),
        "state": str(i.state),
        "entered_state_at": iso(i.entered_state_ts),
        "launched_at": iso(i.launched_ts),
        "ended_at": iso(si.ended_ts),
        "node_name": i.node_name or None,
        "decision_id": i.decision_id or None,
        "team": si.team or None,
        "billed_until": iso(si.billed_until_ts),
        "billed_seconds": round(si.billed_seconds, 3),
    }
    if history:
        out["history"] = [
            {
                "from": str(t.from_state) if t.from_state is not None else None,
                "to": str(t.to_state),
                "at": iso(t.at_ts),
                "cloud_at": iso(t.cloud_ts) if t.cloud_ts is not None else None,
                "reason": t.reason,
            }
            for t in i.history
        ]
    return out


def decision_dict(sd: StoredDecision) -> dict[str, Any]:
    out = decision_to_dict(sd.decision)
    out["reason"] = sd.reason or out["reason"]
    out["created_at"] = iso(sd.created_ts)
    out["iac_review"] = (
        {"format": sd.iac_review_format, "body": sd.iac_review} if sd.iac_review else None
    )
    return out


def plan_dict(p: Plan) -> dict[str, Any]:
    out = plan_to_dict(p)
    out["created_at"] = iso(p.created_ts)
    out["predicted_start_at"] = {k: iso(v) for k, v in p.predicted_start_ts.items()}
    return out


def intent_dict(i: Intent) -> dict[str, Any]:
    return {
        "token": i.token,
        "kind": i.kind,
        "status": i.status,
        "pool": i.pool or None,
        "offer": i.offer or None,
        "nodes": i.nodes,
        "instance_id": i.instance_id or None,
        "decision_id": i.decision_id or None,
        "created_at": iso(i.created_ts),
        "completed_at": iso(i.completed_ts),
        "error_code": i.error_code or None,
    }


def operator_dict(o: OperatorState) -> dict[str, Any]:
    return {
        "paused": o.paused,
        "reason": o.reason or None,
        "updated_at": iso(o.updated_ts) if o.updated_ts else None,
        "updated_by": o.updated_by or None,
        "drained_pools": list(o.drained_pools),
        "sweep": {
            "held": bool(o.sweep_hold_reason),
            "reason": o.sweep_hold_reason or None,
            "since": iso(o.sweep_hold_ts) if o.sweep_hold_ts is not None else None,
            "approved_at": iso(o.sweep_approved_ts) if o.sweep_approved_ts is not None else None,
            "approved_by": o.sweep_approved_by or None,
        },
    }


def report_dict(r: CostReport) -> dict[str, Any]:
    return {
        "from": iso(r.from_ts),
        "to": iso(r.to_ts),
        "group_by": list(r.group_by),
        "kinds": list(r.kinds) or None,
        "currency": "USD",
        "total_usd": f"{r.total:.6f}",
        "ledger_rows": r.ledger_rows,
        "rows": [
            {
                **dict(zip(r.group_by, row.key, strict=True)),
                "cost_usd": f"{row.cost:.6f}",
                "ledger_rows": row.rows,
            }
            for row in r.rows
        ],
    }


def budget_dict(b: BudgetStatus) -> dict[str, Any]:
    return {
        "now": iso(b.now_ts),
        "month_start": iso(b.month_start_ts),
        "month_end": iso(b.month_end_ts),
        "hours_left": round(float(b.hours_left), 3),
        "global": {
            "usd_per_hour_cap": dec(b.global_usd_per_hour),
            "burn_usd_hr": dec(b.burn_usd_hr),
            "headroom_usd_hr": dec(b.global_headroom_usd_hr),
        },
        "teams": [
            {
                "team": t.team,
                "monthly_usd": dec(t.monthly_usd),
                "spent_usd": f"{t.spent_usd:.6f}",
                "burn_usd_hr": dec(t.burn_usd_hr),
                "forecast_usd": f"{t.forecast_usd:.6f}",
                "headroom_usd": f"{t.headroom_usd:.6f}" if t.headroom_usd is not None else None,
                "used_ratio": round(t.used_ratio, 6) if t.used_ratio is not None else None,
                "over_forecast": t.over_forecast,
                "forecast_method": t.forecast_method,
                "forecast_tested_days": t.forecast_tested_days,
                "forecast_mae_usd_per_day": dec(t.forecast_mae_usd),
                "forecast_why": t.forecast_why,
            }
            for t in b.teams
        ],
    }


def telemetry_dict(t: NodeTelemetry) -> dict[str, Any]:
    return {
        "node": t.node,
        "received_at": iso(t.received_ts),
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "util_pct": g.util_pct,
                "mem_used_mib": g.mem_used_mib,
                "mem_total_mib": g.mem_total_mib,
                "power_w": g.power_w,
                "energy_mj": g.energy_mj,
                "temperature_c": g.temperature_c,
                "sampled_at": iso(g.sampled_ts),
            }
            for g in t.gpus
        ],
    }
