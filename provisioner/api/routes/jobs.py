"""Jobs (viewer): the jobs table, filtered and paged, each with its dollars and the decisions
that placed it. `GET /v1/jobs` and `GET /v1/jobs/{job_id}`."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Request

from provisioner.api.access import AUTH_RESPONSES, Viewer
from provisioner.api.deps import deps_of
from provisioner.api.params import Limit, Offset, When, span
from provisioner.api.render import iso
from provisioner.api.schemas.common import Message
from provisioner.api.schemas.jobs import JobOut
from provisioner.domain.job_records import JOB_STATES, JobRecord
from provisioner.ports.store import ControllerStore


def _states(text: str | None) -> set[str] | None:
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


def jobs_router() -> APIRouter:
    r = APIRouter(tags=["jobs"], responses=AUTH_RESPONSES)

    @r.get(
        "/jobs",
        summary="Jobs the controller has seen, newest submit first, with dollars and decisions",
        response_model=list[JobOut],
        responses={400: {"model": Message}},
    )
    def jobs(
        request: Request,
        _: Viewer,
        state: Annotated[
            str | None, Query(max_length=100, description="Comma-separated states.")
        ] = None,
        team: Annotated[str | None, Query(max_length=128)] = None,
        partition: Annotated[str | None, Query(max_length=128)] = None,
        where: Annotated[Literal["cloud", "onprem"] | None, Query()] = None,
        from_: Annotated[When, Query(alias="from")] = None,
        to: When = None,
        limit: Limit = 100,
        offset: Offset = 0,
    ) -> list[dict[str, Any]]:
        store = deps_of(request).store
        f, t = span(from_, to)
        records = store.job_records(
            states=_states(state),
            team=team,
            partition=partition,
            placement=where,
            since=f,
            until=t,
            limit=limit,
            offset=offset,
        )
        return job_dicts(store, records)

    @r.get(
        "/jobs/{job_id}",
        summary="One job: its times, where it ran, its dollars and the decisions that placed it",
        response_model=JobOut,
        responses={404: {"model": Message}},
    )
    def job(
        request: Request, _: Viewer, job_id: Annotated[str, Path(max_length=128)]
    ) -> dict[str, Any]:
        store = deps_of(request).store
        rec = store.job_record(job_id)
        if rec is None:
            raise HTTPException(404, "no such job")
        return job_dicts(store, [rec])[0]

    return r


__all__ = ["job_dicts", "jobs_router"]
