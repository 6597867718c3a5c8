"""Billing rules: per second, with a 60-second minimum per instance, in windows that never
straddle a UTC midnight (so every ledger row belongs to exactly one day)."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.money import cost_for_seconds

MIN_BILLED_SECONDS = 60.0
DAY_S = 86_400.0

# States in which the cloud has a machine running for us (and bills for it).
_BILLABLE = frozenset(
    {
        InstanceState.ALLOCATED,
        InstanceState.JOINING,
        InstanceState.READY,
        InstanceState.DRAINING,
        InstanceState.TERMINATING,
    }
)


def billed_seconds(run_seconds: float) -> float:
    """What a machine that ran `run_seconds` is billed for: per second, at least 60 s."""
    if run_seconds <= 0:
        return 0.0
    return max(MIN_BILLED_SECONDS, run_seconds)


def instance_cost(price_usd_hr: Decimal, run_seconds: float) -> Decimal:
    return cost_for_seconds(price_usd_hr, billed_seconds(run_seconds))


def billing_start(inst: CloudInstance) -> float | None:
    """When the cloud started billing: the first step into a running state, or the launch time
    when the instance was recorded already running. None: it never ran (nothing to bill)."""
    for step in inst.history:
        if step.to_state in _BILLABLE:
            return step.at_ts
    if inst.state in _BILLABLE:
        return inst.launched_ts
    return None


def next_midnight(ts: float) -> float:
    return (ts // DAY_S + 1) * DAY_S


def day_windows(start: float, end: float) -> Iterator[tuple[float, float]]:
    """[start, end) cut at every UTC midnight."""
    a = start
    while a < end:
        b = min(end, next_midnight(a))
        yield a, b
        a = b
