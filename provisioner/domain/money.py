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


def rounded(value: float, places: int) -> Decimal:
    """`Decimal(repr(round(value, places)))`, the same digits and exponent, a quarter faster:
    the planner prices several offers for every job of a pass. Below 1e9 (with up to 6 places) the
    fixed-point string has at most 15 significant digits, so it is what repr of the rounded
    float prints, less trailing zeros (and repr keeps one after the point)."""
    if -1e9 < value < 1e9 and places <= 6:
        s = f"{value:.{places}f}".rstrip("0")
        return Decimal(s + "0" if s[-1] == "." else s)
    return Decimal(repr(round(value, places)))


def to_cents(amount: Decimal) -> Decimal:
    return amount.quantize(CENT, rounding=ROUND_HALF_EVEN)
