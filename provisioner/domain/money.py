"""Money is Decimal, in US dollars. Floats never hold money."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal

ZERO = Decimal("0")
CENT = Decimal("0.01")
MICRO = Decimal("0.000001")


def usd(value: str | int | float | Decimal) -> Decimal:
    """Parse a dollar amount. Floats go through repr so 0.1 stays 0.1."""
    if isinstance(value, Decimal):
        return value
    if isinstance(value, float):
        return Decimal(repr(value))
    return Decimal(value)


def cost_for_seconds(price_per_hour: Decimal, seconds: float | int | Decimal) -> Decimal:
    """price/h x seconds, kept to a micro-dollar so sums of many rows stay within a cent."""
    secs = seconds if isinstance(seconds, Decimal) else Decimal(repr(float(seconds)))
    return (price_per_hour * secs / Decimal(3600)).quantize(MICRO, rounding=ROUND_HALF_EVEN)


def to_cents(amount: Decimal) -> Decimal:
    return amount.quantize(CENT, rounding=ROUND_HALF_EVEN)
