"""Cloud instance lifecycle: an explicit transition table with history, reasons and timeouts."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from decimal import Decimal
from enum import StrEnum
from itertools import pairwise

from provisioner.domain.errors import ProvisionerError
from provisioner.domain.offers import OfferKey


class InstanceState(StrEnum):
    REQUESTED = "requested"
    ALLOCATED = "allocated"
    JOINING = "joining"
    READY = "ready"
    DRAINING = "draining"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self in (InstanceState.TERMINATED, InstanceState.FAILED)


S = InstanceState
TRANSITIONS: dict[InstanceState, frozenset[InstanceState]] = {
    S.REQUESTED: frozenset({S.ALLOCATED, S.FAILED, S.TERMINATING, S.TERMINATED}),
    S.ALLOCATED: frozenset({S.JOINING, S.READY, S.TERMINATING, S.FAILED, S.TERMINATED}),
    S.JOINING: frozenset({S.READY, S.TERMINATING, S.FAILED, S.TERMINATED}),
    S.READY: frozenset({S.DRAINING, S.TERMINATING, S.FAILED, S.TERMINATED}),
    S.DRAINING: frozenset({S.READY, S.TERMINATING, S.FAILED, S.TERMINATED}),
    S.TERMINATING: frozenset({S.TERMINATED, S.FAILED}),
    S.TERMINATED: frozenset(),
    S.FAILED: frozenset({S.TERMINATING, S.TERMINATED}),
}

# Seconds an instance may stay in a state before the controller gives up on it.
DEFAULT_STATE_TIMEOUTS_S: dict[InstanceState, float] = {
    S.REQUESTED: 600.0,
    S.ALLOCATED: 600.0,
    S.JOINING: 600.0,
    S.DRAINING: 7 * 24 * 3600.0,
    S.TERMINATING: 900.0,
}


class IllegalTransition(ProvisionerError, ValueError):
    pass


class TransitionOutOfOrder(IllegalTransition):
    """A step dated before the step it follows. The controller's clock never runs backwards for
    the lifecycle, so this is a backstop that should never fire: a history that runs backwards
    would bill time before a request and expire leases early."""


class InstanceOrigin(StrEnum):
    """How the controller came to hold an instance's record."""

    PLANNED = "planned"  # launched by one of its own scale-ups
    ORPHAN = "orphan"  # found in the cloud by its tags with no record: rebuilt from the tags


@dataclass(frozen=True, slots=True)
class Transition:
    """One lifecycle step. `at_ts`: when the controller saw it, on its own clock (timeouts and
    leases count from it). `cloud_ts`: the cloud's own stamp for the step where it gave one (a
    launch, a termination), translated by the measured skew and clamped into what the
    controller saw: billing starts and ends there."""

    from_state: InstanceState | None
    to_state: InstanceState
    at_ts: float
    reason: str
    cloud_ts: float | None = None

    @property
    def billed_ts(self) -> float:
        return self.at_ts if self.cloud_ts is None else self.cloud_ts


@dataclass(frozen=True, slots=True)
class CloudInstance:
    """A cloud instance this controller owns, with its lifecycle history (dated in order)."""

    instance_id: str
    pool: str
    offer: OfferKey
    gpu_model: str
    gpus: int
    price_usd_hr: Decimal
    state: InstanceState
    launched_ts: float
    decision_id: str = ""
    node_name: str = ""
    history: tuple[Transition, ...] = field(default=())
    origin: InstanceOrigin = InstanceOrigin.PLANNED

    @property
    def entered_state_ts(self) -> float:
        return self.history[-1].at_ts if self.history else self.launched_ts

    def transition(
        self, to: InstanceState, at_ts: float, reason: str, *, cloud_ts: float | None = None
    ) -> CloudInstance:
        if to == self.state:
            return self
        if to not in TRANSITIONS[self.state]:
            raise IllegalTransition(
                f"instance {self.instance_id}: {self.state} -> {to} is not allowed ({reason})"
            )
        if self.history and at_ts < self.history[-1].at_ts:
            raise TransitionOutOfOrder(
                f"instance {self.instance_id}: {self.state} -> {to} dated {at_ts:.3f}, before "
                f"the step it follows ({self.history[-1].at_ts:.3f}): {reason}"
            )
        step = Transition(self.state, to, at_ts, reason, cloud_ts)
        return replace(self, state=to, history=(*self.history, step))

    def timed_out(self, now_ts: float, timeouts: dict[InstanceState, float] | None = None) -> bool:
        limit = (timeouts or DEFAULT_STATE_TIMEOUTS_S).get(self.state)
        return limit is not None and now_ts - self.entered_state_ts > limit


# On its way into Slurm: bought, but not yet a node that registered.
IN_FLIGHT = (InstanceState.REQUESTED, InstanceState.ALLOCATED, InstanceState.JOINING)


def join_timed_out(inst: CloudInstance, now_ts: float, join_timeout_s: float) -> bool:
    """The one join-timeout rule: an instance still in flight `join_timeout_s` after its launch
    did not join in time. The planner terminates it (JOIN_TIMEOUT) and sync fails a JOINING one;
    both ask this.

    An orphan (rebuilt from its tags, typically after a store restored from an older copy) was
    not launched to join anything now: unbound, sync alone keeps it (its pool has a node
    running jobs no record holds, which may be this machine) or ends it; bound to a node Slurm
    powers up, its join timeout counts from that binding, not from a launch long past."""
    if inst.state not in IN_FLIGHT:
        return False
    if inst.origin is InstanceOrigin.ORPHAN:
        return bool(inst.node_name) and now_ts - inst.entered_state_ts > join_timeout_s
    return now_ts - inst.launched_ts > join_timeout_s


def join_lease_s(join_timeout_s: float) -> float:
    """The state lease of in-flight instances: a backstop at twice the join timeout, for when
    the join-timeout rule cannot act (no fresh Slurm view)."""
    return 2 * join_timeout_s


def check_history(instance_id: str, history: tuple[Transition, ...]) -> None:
    """Refuse a history whose steps run backwards (TransitionOutOfOrder)."""
    for prev, step in pairwise(history):
        if step.at_ts < prev.at_ts:
            raise TransitionOutOfOrder(
                f"instance {instance_id}: {step.from_state} -> {step.to_state} dated "
                f"{step.at_ts:.3f}, before the step it follows ({prev.at_ts:.3f})"
            )
