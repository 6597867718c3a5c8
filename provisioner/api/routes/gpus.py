"""GPU waste and health views (viewer): `GET /v1/gpus/waste`, `GET /v1/gpus/alerts`, from the
telemetry the NVML agents pushed (see `provisioner.account.gpu_waste`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request

from provisioner.account.gpu_waste import DEFAULT_ALERT_MAX_AGE_S, gpu_alerts, gpu_waste
from provisioner.api.access import AUTH_RESPONSES, require
from provisioner.api.auth import Role
from provisioner.api.deps import deps_of, now_ts
from provisioner.api.schemas.telemetry import AlertsOut, WasteOut
from provisioner.api.telemetry_views import alerts_dict, policy_of, waste_dict
from provisioner.domain.telemetry import DEFAULT_MAX_AGE_S

MAX_AGE_LIMIT_S = 7 * 86_400.0
NodeQuery = Annotated[str | None, Query(max_length=128, description="Only this node.")]
TeamQuery = Annotated[str | None, Query(max_length=128, description="Only this team.")]
MaxAgeQuery = Annotated[
    float, Query(gt=0, le=MAX_AGE_LIMIT_S, description="Ignore telemetry older than this.")
]


def gpus_router() -> APIRouter:
    r = APIRouter(
        tags=["telemetry"],
        dependencies=[Depends(require(Role.VIEWER))],
        responses=AUTH_RESPONSES,
    )

    @r.get(
        "/gpus/waste",
        summary="GPUs allocated by Slurm but idle per NVML: per node, job and team, with the "
        "idle time and the $ it burns",
        response_model=WasteOut,
    )
    def waste(
        request: Request,
        node: NodeQuery = None,
        team: TeamQuery = None,
        max_age_s: MaxAgeQuery = DEFAULT_MAX_AGE_S,
    ) -> dict[str, Any]:
        deps = deps_of(request)
        now = now_ts(deps)
        report = gpu_waste(deps.store, policy_of(deps), now, max_age_s, node)
        if team is not None:
            report = replace(report, items=tuple(i for i in report.items if i.team == team))
        return waste_dict(report, now, max_age_s)

    @r.get(
        "/gpus/alerts",
        summary="GPU health alerts (temperature, ECC, Xid, row remapping, lost GPUs) from the "
        "latest telemetry, with the policy's thresholds",
        response_model=AlertsOut,
    )
    def alerts(
        request: Request,
        node: NodeQuery = None,
        severity: Annotated[Literal["warning", "critical"] | None, Query()] = None,
        max_age_s: MaxAgeQuery = DEFAULT_ALERT_MAX_AGE_S,
    ) -> dict[str, Any]:
        deps = deps_of(request)
        now = now_ts(deps)
        report = gpu_alerts(deps.store, policy_of(deps), now, max_age_s, node)
        if severity is not None:
            report = replace(
                report, alerts=tuple(x for x in report.alerts if x[0].severity == severity)
            )
        return alerts_dict(report, now, max_age_s)

    return r


__all__ = ["gpus_router"]
