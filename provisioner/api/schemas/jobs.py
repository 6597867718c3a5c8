"""Jobs from the jobs table, with their dollars and the decisions that placed them."""

from __future__ import annotations

from pydantic import Field

from provisioner.api.schemas.common import IsoTime, Money, Out


class JobOut(Out):
    """One job as Slurm last showed it, where it ran, and what it cost."""

    job_id: str
    state: str = Field(description="pending, running, completed, failed, cancelled, or gone.")
    submitted_at: IsoTime
    eligible_at: IsoTime | None
    started_at: IsoTime | None
    ended_at: IsoTime | None
    waited_s: float | None = Field(description="From submit (or eligibility) to start.")
    ran_s: float | None
    time_limit_s: float | None
    gpus: int
    gpu_type: str
    partition: str
    account: str
    user: str
    team: str
    where: str = Field(description="cloud, onprem, or '' while it has not run.")
    nodes: list[str]
    instance_ids: list[str]
    decision_ids: list[str] = Field(description="The decisions that launched its instances.")
    cost_usd: Money = Field(description="Its ledger rows, every kind, summed.")
    predicted_runtime_s: float | None = Field(
        description="The runtime the planner predicted while it waited."
    )
    prediction_source: str
    first_seen_at: IsoTime
    last_seen_at: IsoTime
