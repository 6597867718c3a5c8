"""Renderings of a plan: a table for people, JSON for machines. Never parsed back."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

from provisioner.domain.plan import Action, Decision, Drain, MoveJobs, Plan, ReleaseJobs, ScaleUp


def _num(v: float | None) -> float | None:
    if v is None or math.isinf(v) or math.isnan(v):
        return None
    return round(v, 3)


def decision_to_dict(d: Decision) -> dict[str, Any]:
    return {
        "decision_id": d.decision_id,
        "reason": d.reason.value,
        "job_ids": list(d.job_ids),
        "team": d.team,
        "chosen": str(d.chosen) if d.chosen else None,
        "alternatives": [
            {
                "offer": str(a.offer),
                "usd_per_hour": str(a.usd_per_hour),
                "expected_cost_usd": str(a.expected_cost_usd),
                "chosen": a.chosen,
                "rejected_because": a.rejected_because or None,
            }
            for a in d.alternatives
        ],
        "predicted_wait_s": _num(d.predicted_wait_s),
        "predicted_wait_is_lower_bound": d.wait_is_lower_bound,
        "wait_budget_s": _num(d.wait_budget_s),
        "wait_saved_s": _num(d.wait_saved_s),
        "global_headroom_usd_hr": _dec(d.global_headroom_usd_hr),
        "team_headroom_usd": _dec(d.team_headroom_usd),
        "detail": {**d.about, **d.detail},
    }


def _dec(v: Decimal | None) -> str | None:
    return None if v is None else str(v)


_JOB_ACTIONS = {MoveJobs: "move_jobs", ReleaseJobs: "release_jobs"}


def action_to_dict(a: Action) -> dict[str, Any]:
    if isinstance(a, MoveJobs | ReleaseJobs):
        return {
            "action": _JOB_ACTIONS[type(a)],
            "pool": a.pool,
            "job_ids": list(a.job_ids),
            "decision_id": a.decision.decision_id,
        }
    if isinstance(a, ScaleUp):
        return {
            "action": "scale_up",
            "pool": a.pool,
            "offer": str(a.offer),
            "nodes": a.nodes,
            "gpus_per_node": a.gpus_per_node,
            "usd_per_hour_per_node": str(a.usd_per_hour_per_node),
            "job_ids": list(a.job_ids),
            "decision_id": a.decision.decision_id,
        }
    kind = "drain" if isinstance(a, Drain) else "terminate"
    return {
        "action": kind,
        "node": a.node,
        "instance_id": a.instance_id,
        "pool": a.pool,
        "decision_id": a.decision.decision_id,
    }


def plan_to_dict(p: Plan) -> dict[str, Any]:
    return {
        "created_ts": p.created_ts,
        "planned_usd_per_hour": str(p.planned_usd_per_hour),
        "actions": [action_to_dict(a) for a in p.actions],
        "decisions": [decision_to_dict(d) for d in p.decisions],
        "predicted_start_ts": {k: _num(v) for k, v in p.predicted_start_ts.items()},
    }


def plan_to_json(p: Plan) -> str:
    return json.dumps(plan_to_dict(p), indent=2, sort_keys=False)


def _fmt_s(v: float | None) -> str:
    if v is None or math.isinf(v):
        return "-" if v is None else "never"
    if v >= 3600:
        return f"{v / 3600:.1f}h"
    if v >= 60:
        return f"{v / 60:.0f}m"
    return f"{v:.0f}s"


def plan_table(p: Plan) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(160, Console().width))
    actions = Table(title=f"Actions ({len(p.actions)}), planned ${p.planned_usd_per_hour}/h")
    for col in ("action", "pool", "target", "nodes", "$/h", "jobs", "decision"):
        actions.add_column(col)
    for a in p.actions:
        if isinstance(a, ScaleUp):
            actions.add_row(
                "scale up",
                a.pool,
                str(a.offer),
                str(a.nodes),
                str(a.usd_per_hour_per_node * a.nodes),
                ",".join(a.job_ids[:4]) + ("…" if len(a.job_ids) > 4 else ""),
                a.decision.reason.value,
            )
        elif isinstance(a, MoveJobs | ReleaseJobs):
            jobs = ",".join(a.job_ids[:4]) + ("…" if len(a.job_ids) > 4 else "")
            label = _JOB_ACTIONS[type(a)].replace("_", " ")
            actions.add_row(label, a.pool, "", "", "", jobs, a.decision.reason.value)
        else:
            actions.add_row(
                "drain" if isinstance(a, Drain) else "terminate",
                a.pool,
                a.node or a.instance_id,
                "1",
                "",
                "",
                a.decision.reason.value,
            )
    console.print(actions)
    table = Table(title=f"Decisions ({len(p.decisions)})")
    for col in ("reason", "jobs", "wait", "budget", "chosen", "alternatives ($/h)"):
        table.add_column(col)
    for d in p.decisions[:200]:
        alts = "; ".join(
            f"{a.offer} ${a.usd_per_hour}"
            + (f" ({a.rejected_because})" if a.rejected_because else "")
            for a in d.alternatives[:3]
        )
        table.add_row(
            d.reason.value,
            ",".join(d.job_ids[:3]) or d.node,
            (">" if d.wait_is_lower_bound else "") + _fmt_s(d.predicted_wait_s),
            _fmt_s(d.wait_budget_s),
            str(d.chosen or ""),
            alts,
        )
    console.print(table)
    if len(p.decisions) > 200:
        console.print(f"… {len(p.decisions) - 200} more decisions (use --json)")
