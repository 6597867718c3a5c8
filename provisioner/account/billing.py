"""Billing rules: per second, with a 60-second minimum per instance, in windows that never
straddle a UTC midnight (so every ledger row belongs to exactly one day).

Time no job used is billed under one of three kinds, so money with no Slurm node behind it is
visible on its own: `orphan` for an instance found in the cloud with no record (its record is
rebuilt from its tags), `unbound` for a launched instance before it was bound to a Slurm node,
and `idle` for a bound node's unused GPUs."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal

from provisioner.domain.errors import InvalidArgument
from provisioner.domain.instances import CloudInstance, InstanceOrigin, InstanceState
from provisioner.domain.money import cost_for_seconds
from provisioner.domain.records import LedgerKind

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
    """When the cloud started billing: the first step into a running state (at the cloud's own
    stamp for it, translated and clamped, where it gave one), or the launch time when the
    instance was recorded already running. None: it never ran (nothing to bill)."""
    for step in inst.history:
        if step.to_state in _BILLABLE:
            return step.billed_ts
    if inst.state in _BILLABLE:
        return inst.launched_ts
    return None


# Times the ledger accepts: 1970 to 2286. Outside that range a float cannot hold a midnight
# exactly (at 1e22 s, ts // DAY_S * DAY_S == ts), so cutting days would never advance.
MAX_TS = 1e10


def next_midnight(ts: float) -> float:
    return (ts // DAY_S + 1) * DAY_S


def month_start(ts: float) -> float:
    """The UTC midnight that starts the month holding `ts`."""
    day = datetime.fromtimestamp(check_ts(ts, "time"), UTC)
    return day.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()


def check_ts(ts: float, what: str) -> float:
    if not (math.isfinite(ts) and 0 <= ts < MAX_TS):
        raise InvalidArgument(f"{what} {ts!r} is not a POSIX time between 1970 and 2286")
    return ts


def day_windows(start: float, end: float) -> Iterator[tuple[float, float]]:
    """[start, end) cut at every UTC midnight. Times outside 1970-2286 are refused (ValueError)
    rather than looped on forever."""
    a = check_ts(start, "window start")
    check_ts(end, "window end")
    while a < end:
        b = min(end, next_midnight(a))
        yield a, b
        a = b


# States in which the instance is bound to a Slurm node.
_BOUND = frozenset({InstanceState.JOINING, InstanceState.READY, InstanceState.DRAINING})


def unbound_until(inst: CloudInstance) -> float:
    """Until when the instance ran with no Slurm node: its first step into joining or beyond;
    -inf for one recorded with its node from the start, +inf for one never bound."""
    for step in inst.history:
        if step.to_state in _BOUND:
            return step.at_ts
    return -math.inf if inst.node_name else math.inf


def unused_kind(inst: CloudInstance, window_end: float) -> LedgerKind:
    """The ledger kind of the time no job used in a window ending at `window_end`."""
    if inst.origin is InstanceOrigin.ORPHAN:
        return LedgerKind.ORPHAN
    return LedgerKind.UNBOUND if window_end <= unbound_until(inst) else LedgerKind.IDLE
