"""`GET /v1/status`: the controller at a glance."""

from __future__ import annotations

from typing import Any

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from provisioner.api.schemas.common import IsoTime, Money, Out
from provisioner.api.schemas.operator import OperatorOut


class IntentOut(Out):
    """An action recorded before its cloud call and not yet completed (`render.intent_dict`)."""

    token: str
    kind: str
    status: str
    pool: str | None
    offer: str | None
    nodes: int
    instance_id: str | None
    decision_id: str | None
    created_at: IsoTime | None
    completed_at: IsoTime | None
    error_code: str | None


class SnapshotOut(Out):
    """A summary of the latest observed `ClusterSnapshot`."""

    taken_at: IsoTime | None
    stale: bool
    stale_reasons: list[str]
    pending_jobs: int
    pending_gpus: int
    running_jobs: int
    nodes: int


class StatusOut(Out):
    now: IsoTime | None
    version: str
    operator: OperatorOut
    instances_by_state: dict[str, int] = Field(description="Every lifecycle state, with a count.")
    cloud_usd_per_hour: Money
    pending_intents: list[IntentOut]
    planner_available: bool
    # Present only when the API is wired to them; absent (not null) otherwise, hence
    # no null in the schema and `response_model_exclude_unset` on the route.
    snapshot: SnapshotOut | SkipJsonSchema[None] = Field(
        default=None, description="Only when a snapshot is wired in and one was taken."
    )
    controller: dict[str, Any] | SkipJsonSchema[None] = Field(
        default=None, description="Only when the controller adds its own fields (its last pass)."
    )


__all__ = ["IntentOut", "SnapshotOut", "StatusOut"]
