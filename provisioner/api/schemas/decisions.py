"""Planner decisions and the dry-run plan (`plan.explain` renderings, via `render`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from provisioner.api.schemas.common import IsoTime, Money, Out


class AlternativeOut(Out):
    """An offer the planner considered for a decision."""

    offer: str
    usd_per_hour: Money
    expected_cost_usd: Money
    chosen: bool
    rejected_because: str | None


class DecisionOut(Out):
    """One decision with its reasons, as `provisioner plan --json` renders it."""

    decision_id: str
    reason: str = Field(description="The reason code, e.g. burst_wait_exceeds_budget.")
    job_ids: list[str]
    team: str
    chosen: str | None
    alternatives: list[AlternativeOut]
    predicted_wait_s: float | None
    predicted_wait_is_lower_bound: bool
    wait_budget_s: float | None
    wait_saved_s: float | None
    global_headroom_usd_hr: Money | None
    team_headroom_usd: Money | None
    detail: dict[str, str]


class IacReviewOut(Out):
    format: str
    body: str


class StoredDecisionOut(DecisionOut):
    """A recorded decision: when it was made, and the IaC review stored with it."""

    created_at: IsoTime | None
    iac_review: IacReviewOut | None


class ScaleUpOut(Out):
    action: Literal["scale_up"]
    pool: str
    offer: str
    nodes: int
    gpus_per_node: int
    usd_per_hour_per_node: Money
    job_ids: list[str]
    decision_id: str


class NodeActionOut(Out):
    """Drain or terminate one burst node."""

    action: Literal["drain", "terminate"]
    node: str
    instance_id: str
    pool: str
    decision_id: str


class JobsActionOut(Out):
    """Move pending jobs to capacity already bought, or release jobs held after a failed
    launch, into a burst pool's partition."""

    action: Literal["move_jobs", "release_jobs"]
    pool: str
    job_ids: list[str]
    decision_id: str


ActionOut = Annotated[ScaleUpOut | NodeActionOut | JobsActionOut, Field(discriminator="action")]


class PlanOut(Out):
    created_ts: float
    planned_usd_per_hour: Money
    actions: list[ActionOut]
    decisions: list[DecisionOut]
    predicted_start_ts: dict[str, float | None] = Field(description="job id -> POSIX seconds")
    created_at: IsoTime | None
    predicted_start_at: dict[str, IsoTime | None] = Field(description="job id -> ISO 8601 UTC")


__all__ = [
    "ActionOut",
    "AlternativeOut",
    "DecisionOut",
    "IacReviewOut",
    "JobsActionOut",
    "NodeActionOut",
    "PlanOut",
    "ScaleUpOut",
    "StoredDecisionOut",
]
