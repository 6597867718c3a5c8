"""Jobs as the API and the console show them: each record of the jobs table with its ledger
dollars (one grouped query) and the decisions that launched its instances."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from fastapi import HTTPException

from provisioner.api.render import iso
from provisioner.domain.job_records import JOB_STATES, JobRecord
from provisioner.ports.store import ControllerStore


def parse_states(text: str | None) -> set[str] | None:
    """Comma-separated job states; a 400 naming any unknown one."""
    if not text:
        return None
    states = {s.strip() for s in text.split(",") if s.strip()}
    unknown = sorted(states - set(JOB_STATES))
    if unknown:
        raise HTTPException(400, f"state: unknown {', '.join(unknown)}; one of {JOB_STATES}")
    return states


def job_dicts(store: ControllerStore, records: Sequence[JobRecord]) -> list[dict[str, Any]]:
    """The API's view of jobs: each with its ledger dollars and its instances' decisions."""
    costs = store.job_costs([r.job_id for r in records])
    decisions: dict[str, str] = {}
    for iid in {i for r in records for i in r.instance_ids}:
        si = store.instance(iid)
        if si is not None and si.instance.decision_id:
            decisions[iid] = si.instance.decision_id
    return [
        {
            "job_id": r.job_id,
            "state": r.state,
            "submitted_at": iso(r.submit_ts),
            "eligible_at": iso(r.eligible_ts),
            "started_at": iso(r.start_ts),
            "ended_at": iso(r.end_ts),
            "waited_s": r.waited_s,
            "ran_s": r.ran_s,
            "time_limit_s": r.time_limit_s,
            "gpus": r.gpus,
            "gpu_type": r.gpu_type,
            "partition": r.partition,
            "account": r.account,
            "user": r.user,
            "team": r.team,
            "where": r.placement,
            "nodes": list(r.nodes),
            "instance_ids": list(r.instance_ids),
            "decision_ids": sorted({decisions[i] for i in r.instance_ids if i in decisions}),
            "cost_usd": str(costs.get(r.job_id, Decimal(0)).quantize(Decimal("0.000001"))),
            "predicted_runtime_s": r.predicted_runtime_s,
            "prediction_source": r.prediction_source,
            "first_seen_at": iso(r.first_seen_ts),
            "last_seen_at": iso(r.last_seen_ts),
        }
        for r in records
    ]


__all__ = ["job_dicts", "parse_states"]
