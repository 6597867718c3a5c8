"""FinOps (viewer): cost reports (JSON or CSV), budget status, the FOCUS export (CSV, streamed).

Bad report parameters raise `ReportError` (an `InvalidArgument`): a 400 via `api/errors.py`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import ResponseValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError

from provisioner.account.budgets import budget_status, with_forecasts
from provisioner.account.focus import FocusOptions
from provisioner.account.known import check_window
from provisioner.account.reports import cost_report, parse_group_by, parse_kinds, report_to_csv
from provisioner.api import render
from provisioner.api.access import AUTH_RESPONSES, Viewer
from provisioner.api.deps import deps_of, now_ts
from provisioner.api.params import When, span, window
from provisioner.api.schemas.common import Message
from provisioner.api.schemas.costs import BudgetsOut, CostReportOut

CSV = {"schema": {"type": "string", "description": "CSV with a header line"}}


def _check(body: dict[str, Any]) -> None:
    """Hold a report to its model. A mismatch is our bug: a 500 (as FastAPI's own response
    validation gives), not the 422 a ValidationError would get."""
    try:
        CostReportOut.model_validate(body)
    except ValidationError as exc:
        raise ResponseValidationError(exc.errors(include_input=False)) from None


def costs_router() -> APIRouter:
    r = APIRouter(tags=["costs"], responses=AUTH_RESPONSES)

    @r.get(
        "/costs",
        summary="Cost report grouped by any of team, account, user, partition, cloud, region, "
        "pool, kind, day, project, node, slice over [from, to)",
        response_model=CostReportOut,
        responses={
            200: {"content": {"application/json": {}, "text/csv": CSV}},
            400: {"model": Message},
            404: {"model": Message, "description": "The window is wholly outside the ledger"},
            429: {"model": Message, "description": "Too many cost reports; see Retry-After"},
        },
    )
    def costs(
        request: Request,
        who: Viewer,
        group_by: Annotated[
            str | None,
            Query(
                max_length=200,
                description="Comma-separated keys: team, account, user, partition, cloud, "
                "region, pool, kind, day, project (the Slurm account), node, slice (the part "
                "of a GPU a job held: a MIG GRES type, or shard). Empty: one total.",
            ),
        ] = None,
        from_: Annotated[When, Query(alias="from")] = None,
        to: When = None,
        kind: Annotated[
            str | None,
            Query(max_length=100, description="Only these kinds: job, idle, onprem, energy."),
        ] = None,
        format: Annotated[Literal["json", "csv"], Query()] = "json",
    ) -> Response:
        deps = deps_of(request)
        deps.rate_limiter.check("cost reports", who)
        keys = parse_group_by(group_by)
        kinds = parse_kinds(kind)
        f, t = window(deps, from_, to)
        check_window(deps.store, f, t, deps.clock.now().timestamp())
        report = cost_report(deps.store, keys, f, t, kinds=kinds)
        if format == "csv":
            return Response(
                report_to_csv(report),
                media_type="text/csv; charset=utf-8",
                headers={"Content-Disposition": 'attachment; filename="costs.csv"'},
            )
        # Checked against the model, but answered as rendered: a row's keys keep the order
        # of `group_by` (a model would reorder them), and carry only the keys grouped by.
        body = render.report_dict(report)
        _check(body)
        return JSONResponse(body)

    @r.get(
        "/budgets",
        summary="Budget status: spent this month, burn rate, forecast, headroom",
        response_model=BudgetsOut,
    )
    def budgets(request: Request, _: Viewer) -> dict[str, Any]:
        deps = deps_of(request)
        status = with_forecasts(deps.store, budget_status(deps.store, now_ts(deps)))
        return render.budget_dict(status)

    @r.get(
        "/focus.csv",
        summary="FOCUS 1.2 cost export (CSV, streamed) of the ledger rows starting in [from, to)",
        response_class=StreamingResponse,
        responses={
            200: {"content": {"text/csv": CSV}},
            400: {"model": Message},
            429: {"model": Message, "description": "Too many FOCUS exports; see Retry-After"},
        },
    )
    def focus(
        request: Request,
        who: Viewer,
        from_: Annotated[When, Query(alias="from")] = None,
        to: When = None,
        compat: Annotated[
            bool,
            Query(description="Also emit the column names the focus-validator 1.0 rules use."),
        ] = True,
    ) -> StreamingResponse:
        deps = deps_of(request)
        deps.rate_limiter.check("FOCUS exports", who)
        f, t = span(from_, to)
        opts = FocusOptions(
            controller=deps.focus.controller,
            billing_accounts=deps.focus.billing_accounts,
            compat_1_0=compat,
        )
        body: Iterator[str | bytes] = deps.heavy_reads.focus_csv(deps.store, f, t, opts)
        return StreamingResponse(
            body,
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": 'attachment; filename="focus.csv"'},
        )

    return r


__all__ = ["costs_router"]
