"""Budget forecasts from the pattern of past days (account/forecast.py), on hand-worked months."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from provisioner.account.forecast import backtest, forecast

NOW = datetime(2026, 1, 20, 12, tzinfo=UTC).timestamp()  # a Tuesday, noon
END = datetime(2026, 2, 1, tzinfo=UTC).timestamp()
# Jan 6 (a Tuesday) to Jan 19: $100 a weekday, $10 a weekend day
HISTORY = {
    date(2026, 1, 6) + timedelta(days=i): Decimal(10 if (6 + i) % 7 in (3, 4) else 100)
    for i in range(14)
}


def test_a_weekly_pattern_is_found_and_forecast_day_by_day():
    assert HISTORY[date(2026, 1, 10)] == 10 and HISTORY[date(2026, 1, 12)] == 100  # Sat, Mon
    # weekday/weekend: every day after two of its kind is guessed exactly (8 + 2 days)
    assert backtest("weekday/weekend", HISTORY) == (10, Decimal(0))
    days, mae = backtest("daily mean", HISTORY)
    assert days == 12 and mae is not None and mae > 0
    f = forecast(Decimal("1234"), Decimal("50"), HISTORY, NOW, END)
    assert f.method == "weekday/weekend" and f.tested_days == 10
    assert f.mae_usd_per_day == 0
    # left: half of Tue 20th ($50), Wed-Fri ($300), Sat-Sun ($20), Mon-Fri ($500), Sat ($10)
    assert f.usd == Decimal("1234") + Decimal(880)


def test_too_few_days_falls_back_to_the_burn_rate_and_says_why():
    short = {date(2026, 1, 19): Decimal(100)}
    f = forecast(Decimal("10"), Decimal("2"), short, NOW, END)
    # 11.5 days left x 24 h x $2/h
    assert f.method == "burn" and f.usd == Decimal("10") + Decimal("2") * Decimal("276")
    assert f.mae_usd_per_day is None and "needs 3" in f.why
