"""Cost reports and budgets (`render.report_dict`, `render.budget_dict`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from provisioner.api.schemas.common import IsoTime, Money, Out

# A group key appears in a row only when the report is grouped by it.
GroupValue = str | SkipJsonSchema[None]


class ReportRowOut(Out):
    """One group: its key values (only the keys grouped by), its cost and its ledger rows."""

    team: GroupValue = None
    account: GroupValue = None
    user: GroupValue = None
    partition: GroupValue = None
    cloud: GroupValue = None
    region: GroupValue = None
    pool: GroupValue = None
    kind: GroupValue = None
    day: GroupValue = Field(default=None, description="YYYY-MM-DD (UTC)")
    project: GroupValue = Field(default=None, description="The Slurm account")
    node: GroupValue = Field(default=None, description="The Slurm node the row was priced on")
    slice: GroupValue = Field(
        default=None,
        description="The part of a GPU the row's job held: its MIG devices' GRES type "
        "(e.g. 1g.10gb) or shard; empty for whole GPUs and rows of no job",
    )
    cost_usd: Money
    ledger_rows: int


class CostReportOut(Out):
    from_: IsoTime | None = Field(alias="from")
    to: IsoTime | None
    group_by: list[
        Literal[
            "team",
            "account",
            "user",
            "partition",
            "cloud",
            "region",
            "pool",
            "kind",
            "day",
            "project",
            "node",
            "slice",
        ]
    ]
    kinds: list[str] | None = Field(description="The kinds asked for; null: all of them.")
    currency: Literal["USD"]
    total_usd: Money
    ledger_rows: int
    rows: list[ReportRowOut]


class GlobalBudgetOut(Out):
    usd_per_hour_cap: Money | None
    burn_usd_hr: Money | None
    headroom_usd_hr: Money | None


class TeamBudgetOut(Out):
    team: str
    monthly_usd: Money | None
    spent_usd: Money
    burn_usd_hr: Money | None
    forecast_usd: Money
    headroom_usd: Money | None
    used_ratio: float | None
    over_forecast: bool
    forecast_method: Literal["burn", "daily mean", "weekday/weekend"] = Field(
        description="How the forecast was made (docs/api.md, GET /v1/budgets)."
    )
    forecast_tested_days: int = Field(description="Past days the method was backtested on.")
    forecast_mae_usd_per_day: Money | None = Field(
        description="The method's backtest error, mean absolute $/day; null: not tested."
    )
    forecast_why: str


class BudgetsOut(Out):
    now: IsoTime | None
    month_start: IsoTime | None
    month_end: IsoTime | None
    hours_left: float
    global_: GlobalBudgetOut = Field(alias="global")
    teams: list[TeamBudgetOut]


__all__ = [
    "BudgetsOut",
    "CostReportOut",
    "GlobalBudgetOut",
    "ReportRowOut",
    "TeamBudgetOut",
]
