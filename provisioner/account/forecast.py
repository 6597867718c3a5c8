"""A team's month-end cloud spend, forecast from the pattern of its past days, with the error
each way of forecasting had when backtested on the days the ledger holds.

The ways (`METHODS`):
- `burn`: spent + the $/h of the fleet running now x hours left (the fleet kept as it is);
- `daily mean`: spent + the mean spend of the past complete days x days left;
- `weekday/weekend`: the same, with one mean for Monday to Friday and one for the weekend,
  each applied to the days of its kind that are left.

Backtest: walk forward over the past complete days (up to `LOOKBACK_DAYS`); each day is
forecast from the days before it only (at least `MIN_HISTORY` of them, of its kind for
weekday/weekend), and the error is the mean absolute difference in dollars a day. `burn`
cannot be backtested (the $/h of a past moment is not kept). The forecast uses the pattern
method with the lowest error when at least `MIN_TESTED` days were tested, else `burn`; it
says which, and the error it had.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

LOOKBACK_DAYS = 28
MIN_HISTORY = 2
MIN_TESTED = 3
METHODS = ("burn", "daily mean", "weekday/weekend")
_MICRO = Decimal("0.000001")


@dataclass(frozen=True, slots=True)
class Forecast:
    usd: Decimal
    method: str
    tested_days: int = 0
    mae_usd_per_day: Decimal | None = None  # the method's backtest error (None: untested)
    why: str = ""


def _weekend(d: date) -> bool:
    return d.weekday() >= 5


def _mean(values: Sequence[Decimal]) -> Decimal | None:
    return sum(values, Decimal(0)) / len(values) if values else None


def _predict(method: str, history: Mapping[date, Decimal], day: date) -> Decimal | None:
    """One day's spend from the days before it, or None when too few."""
    past = [d for d in history if d < day]
    if method == "daily mean":
        return _mean([history[d] for d in past]) if len(past) >= MIN_HISTORY else None
    same = [history[d] for d in past if _weekend(d) == _weekend(day)]
    return _mean(same) if len(same) >= MIN_HISTORY else None


def backtest(method: str, history: Mapping[date, Decimal]) -> tuple[int, Decimal | None]:
    """(days tested, mean absolute error in $/day) of `method` over `history`."""
    errors = []
    for day in sorted(history):
        guess = _predict(method, history, day)
        if guess is not None:
            errors.append(abs(guess - history[day]))
    return len(errors), (_mean(errors) if errors else None)


def forecast(
    spent: Decimal,
    burn_usd_hr: Decimal,
    history: Mapping[date, Decimal],
    now_ts: float,
    month_end_ts: float,
) -> Forecast:
    """Month-end spend. `history`: spend per past complete UTC day (days with no spend 0)."""
    hours_left = Decimal(repr(max(0.0, month_end_ts - now_ts))) / 3600
    by_burn = (spent + burn_usd_hr * hours_left).quantize(_MICRO)
    tested = {m: backtest(m, history) for m in METHODS[1:]}
    usable = {m: t for m, t in tested.items() if t[0] >= MIN_TESTED and t[1] is not None}
    if not usable:
        days = max((t[0] for t in tested.values()), default=0)
        why = f"{days} past day(s) to test a pattern on (needs {MIN_TESTED})"
        return Forecast(by_burn, "burn", days, None, why)
    method = min(usable, key=lambda m: (usable[m][1], METHODS.index(m)))
    days, mae = usable[method]
    now = datetime.fromtimestamp(now_ts, UTC)
    today = now.date()
    end = datetime.fromtimestamp(month_end_ts, UTC).date()
    midnight = datetime(now.year, now.month, now.day, tzinfo=UTC)
    rest_of_today = Decimal(repr(1 - (now - midnight).total_seconds() / 86_400))
    total = spent
    d = today
    while d < end:  # each day left, at its kind's rate (today: the part of it left)
        rate = _predict(method, history, d) or Decimal(0)
        total += rate * (rest_of_today if d == today else Decimal(1))
        d += timedelta(days=1)
    why = f"the lowest backtest error of {len(usable)} pattern method(s)"
    return Forecast(total.quantize(_MICRO), method, days, mae.quantize(_MICRO) if mae else mae, why)
