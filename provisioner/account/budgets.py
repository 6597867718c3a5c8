"""Budget status: what each team spent on cloud this month, its burn rate, a month-end forecast
and the headroom left; and the global $/h cap against what is running now.

- spent: ledger cost of the cloud kinds (job, idle, unbound, orphan) with a start in this UTC
  calendar month;
- burn: $/h of the team's live cloud instances (requested ones included: they are committed);
- forecast: spent + burn x hours left in the month (the fleet as it runs now, kept running);
  `with_forecasts` replaces it with the pattern of the team's past days where a backtest on
  them supports one (account/forecast.py), and says which;
- headroom: monthly budget - spent.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Protocol

from provisioner.account.forecast import LOOKBACK_DAYS, forecast
from provisioner.account.reports import cost_report
from provisioner.domain.records import CLOUD_KINDS as CLOUD_KINDS  # the console imports it here
from provisioner.ports.store import InstanceRepo, Ledger, PolicyRepo


class BudgetReads(PolicyRepo, InstanceRepo, Ledger, Protocol):
    """What a budget check reads: the budgets, the instances running, the month's spend."""


@dataclass(frozen=True, slots=True)
class TeamBudgetStatus:
    team: str
    monthly_usd: Decimal | None
    spent_usd: Decimal
    burn_usd_hr: Decimal
    forecast_usd: Decimal
    headroom_usd: Decimal | None
    forecast_method: str = "burn"
    forecast_tested_days: int = 0
    forecast_mae_usd: Decimal | None = None  # $/day, the method's backtest error
    forecast_why: str = ""

    @property
    def used_ratio(self) -> float | None:
        if self.monthly_usd is None or self.monthly_usd == 0:
            return None
        return float(self.spent_usd / self.monthly_usd)

    @property
    def over_forecast(self) -> bool:
        return self.monthly_usd is not None and self.forecast_usd > self.monthly_usd


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    now_ts: float
    month_start_ts: float
    month_end_ts: float
    global_usd_per_hour: Decimal | None
    burn_usd_hr: Decimal
    teams: tuple[TeamBudgetStatus, ...]

    @property
    def global_headroom_usd_hr(self) -> Decimal | None:
        if self.global_usd_per_hour is None:
            return None
        return self.global_usd_per_hour - self.burn_usd_hr

    @property
    def hours_left(self) -> Decimal:
        return Decimal(repr(max(0.0, self.month_end_ts - self.now_ts))) / Decimal(3600)


def month_bounds(now_ts: float) -> tuple[float, float]:
    now = datetime.fromtimestamp(now_ts, UTC)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (
        start.replace(year=start.year + 1, month=1)
        if start.month == 12
        else start.replace(month=start.month + 1)
    )
    return start.timestamp(), end.timestamp()


def budget_status(store: BudgetReads, now_ts: float) -> BudgetStatus:
    m0, m1 = month_bounds(now_ts)
    # The month is whole UTC days, so the (kind, team) rollup answers it exactly.
    spent = store.spend_by_team(m0, m1, CLOUD_KINDS)
    burn: dict[str, Decimal] = {}
    total_burn = Decimal(0)
    for si in store.instances(live_only=True):
        burn[si.team] = burn.get(si.team, Decimal(0)) + si.instance.price_usd_hr
        total_burn += si.instance.price_usd_hr
    hours_left = Decimal(repr(max(0.0, m1 - now_ts))) / Decimal(3600)
    budgets = store.budgets()
    monthly = {b.name: b.monthly_usd for b in budgets if b.scope == "team"}
    global_cap = next((b.usd_per_hour for b in budgets if b.scope == "global"), None)
    teams = sorted(set(monthly) | {t for t in spent if t} | {t for t in burn if t})
    rows = []
    for team in teams:
        sp = spent.get(team, Decimal(0))
        br = burn.get(team, Decimal(0))
        cap = monthly.get(team)
        forecast = (sp + br * hours_left).quantize(Decimal("0.000001"))
        rows.append(
            TeamBudgetStatus(
                team=team,
                monthly_usd=cap,
                spent_usd=sp,
                burn_usd_hr=br,
                forecast_usd=forecast,
                headroom_usd=(cap - sp) if cap is not None else None,
            )
        )
    return BudgetStatus(now_ts, m0, m1, global_cap, total_burn, tuple(rows))


def with_forecasts(store: BudgetReads, status: BudgetStatus) -> BudgetStatus:
    """`status` with each team's forecast from the pattern of its past complete days (up to
    `LOOKBACK_DAYS`, from the first day with any cloud spend), where the backtest supports
    one; else the burn forecast, saying why."""
    today = datetime.fromtimestamp(status.now_ts, UTC).date()
    start = today - timedelta(days=LOOKBACK_DAYS)
    t0 = datetime(start.year, start.month, start.day, tzinfo=UTC).timestamp()
    t1 = datetime(today.year, today.month, today.day, tzinfo=UTC).timestamp()
    rows = cost_report(store, ("team", "day"), t0, t1, kinds=CLOUD_KINDS).rows if t1 > t0 else ()
    daily: dict[str, dict[date, Decimal]] = {}
    for r in rows:
        daily.setdefault(str(r.key[0]), {})[date.fromisoformat(str(r.key[1]))] = r.cost
    first = min((d for days in daily.values() for d in days), default=today)
    span = [first + timedelta(days=i) for i in range((today - first).days)]
    teams = []
    for t in status.teams:
        seen = daily.get(t.team, {})
        history = {d: seen.get(d, Decimal(0)) for d in span}
        f = forecast(t.spent_usd, t.burn_usd_hr, history, status.now_ts, status.month_end_ts)
        teams.append(
            replace(
                t,
                forecast_usd=f.usd,
                forecast_method=f.method,
                forecast_tested_days=f.tested_days,
                forecast_mae_usd=f.mae_usd_per_day,
                forecast_why=f.why,
            )
        )
    return replace(status, teams=tuple(teams))
