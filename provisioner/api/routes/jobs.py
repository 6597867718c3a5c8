"""Jobs (viewer): the jobs table, filtered and paged, each with its dollars and the decisions
that placed it. `GET /v1/jobs` and `GET /v1/jobs/{job_id}`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Request

from provisioner.account.known import check_team
from provisioner.api.access import AUTH_RESPONSES, Viewer
from provisioner.api.deps import deps_of
from provisioner.api.jobs_view import job_dicts, parse_states
from provisioner.api.params import Limit, Offset, When, span
from provisioner.api.schemas.common import Message
from provisioner.api.schemas.jobs import JobOut


def jobs_router() -> APIRouter:
    r = APIRouter(tags=["jobs"], responses=AUTH_RESPONSES)

    @r.get(
        "/jobs",
        summary="Jobs the controller has seen, newest submit first, with dollars and decisions",
        response_model=list[JobOut],
        responses={
            400: {"model": Message},
            404: {"model": Message, "description": "No budget, job or ledger row names the team"},
        },
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
        ran_on: Annotated[
            str | None,
            Query(max_length=128, description="A node name or instance id it ran on."),
        ] = None,
        from_: Annotated[When, Query(alias="from")] = None,
        to: When = None,
        limit: Limit = 100,
        offset: Offset = 0,
    ) -> list[dict[str, Any]]:
        deps = deps_of(request)
        store = deps.store
        f, t = span(from_, to)
        records = store.job_records(
            states=parse_states(state),
            team=team,
            partition=partition,
            placement=where,
            ran_on=ran_on,
            since=f,
            until=t,
            limit=limit,
            offset=offset,
        )
        if not records:  # none: a 404 when it is because nobody knows the team
            check_team(store, team, deps.clock.now().timestamp())
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


__all__ = ["jobs_router"]
