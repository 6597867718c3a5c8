"""Carry out scale-ups and terminations through the ports, with offer fallback and back-off.

The planner ranks offers; `scale_up_with_fallback` tries them in that order. A capacity or quota
error (raised, or reported by the group for the instances it could not launch) backs the offer off
and moves the remainder to the next offer. Throttling and transient errors were already retried
inside the adapters by the one retry policy. Intent is handed to `record_intent` before each cloud
call so the store can write it first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from provisioner.act.backoff_feed import BackoffSettings, record_error, record_success
from provisioner.act.ports import CloudCapacity, OwnedInstance, PoolDriver, PoolSpec, request_token
from provisioner.domain.errors import CloudError, NotFoundError
from provisioner.domain.offers import OfferKey
from provisioner.plan.backoff import Backoff

log = logging.getLogger(__name__)

IntentRecorder = Callable[[PoolSpec, int, str], None]


@dataclass(frozen=True, slots=True)
class CloudPorts:
    driver: PoolDriver
    capacity: CloudCapacity


@dataclass(frozen=True, slots=True)
class Placed:
    offer: OfferKey
    group: str
    added: int
    target: int
    token: str


@dataclass(frozen=True, slots=True)
class Failed:
    offer: OfferKey
    error: CloudError


@dataclass(frozen=True, slots=True)
class ScaleUpOutcome:
    requested: int
    placed: tuple[Placed, ...]
    failed: tuple[Failed, ...]
    skipped: tuple[OfferKey, ...]  # blocked by back-off, or the group is already at its max
    backoff: Backoff

    @property
    def placed_nodes(self) -> int:
        return sum(p.added for p in self.placed)

    @property
    def unplaced(self) -> int:
        return max(0, self.requested - self.placed_nodes)


@dataclass(frozen=True, slots=True)
class FillCheck:
    """A group that the cloud could not fill: how many it holds now, and why."""

    launched: int
    shrunk_from: int
    error: CloudError


def settle_fill(spec: PoolSpec, capacity: CloudCapacity) -> FillCheck | None:
    """When the group reports a launch failure for its shortfall, shrink it to what it holds.

    Otherwise the cloud keeps retrying the launch in the background and may fill it much later,
    after the planner has placed those nodes elsewhere. Also for later reconcile passes."""
    status = capacity.group_status(spec)
    if status.failure is None or status.shortfall == 0:
        return None
    token = request_token(spec.decision_id, spec.group_name, "shrink", status.launched)
    capacity.resize(spec, status.launched, token)
    log.warning(
        "group %s filled %d of %d: %s",
        spec.group_name,
        status.launched,
        status.desired,
        status.failure.code,
    )
    return FillCheck(status.launched, status.desired, status.failure)


def scale_up_with_fallback(
    specs: Sequence[PoolSpec],
    nodes: int,
    *,
    ports: Mapping[str, CloudPorts],
    backoff: Backoff,
    now_ts: float,
    settings: BackoffSettings | None = None,
    record_intent: IntentRecorder | None = None,
) -> ScaleUpOutcome:
    """Add `nodes` nodes, trying `specs` (one per offer, best first) in order."""
    settings = settings or BackoffSettings()
    remaining = nodes
    placed: list[Placed] = []
    failed: list[Failed] = []
    skipped: list[OfferKey] = []
    for spec in specs:
        if remaining <= 0:
            break
        key = spec.offer
        if backoff.blocked(key, now_ts):
            skipped.append(key)
            continue
        port = ports[spec.cloud]
        try:
            port.driver.ensure(spec)
            before = port.capacity.group_status(spec)
            room = spec.max_size - before.desired
            if room <= 0:
                skipped.append(key)
                continue
            target = before.desired + min(remaining, room)
            token = request_token(spec.decision_id, spec.group_name, "resize", target)
            if record_intent is not None:
                record_intent(spec, target, token)
            port.capacity.resize(spec, target, token)
            fill = settle_fill(spec, port.capacity)
        except CloudError as err:
            log.warning("offer %s failed: %s (%s)", key, type(err).__name__, err.code)
            failed.append(Failed(key, err))
            backoff = record_error(backoff, key, err, now_ts, settings)
            continue
        if fill is None:
            added = target - before.desired
            backoff = record_success(backoff, key)
        else:  # partially filled: keep what launched, back the offer off, move on
            added = max(0, fill.launched - before.desired)
            target = fill.launched
            failed.append(Failed(key, fill.error))
            backoff = record_error(backoff, key, fill.error, now_ts, settings)
        if added > 0:
            placed.append(Placed(key, spec.group_name, added, target, token))
            remaining -= added
    return ScaleUpOutcome(nodes, tuple(placed), tuple(failed), tuple(skipped), backoff)


def terminate_instance(
    instance: OwnedInstance, decision_id: str, capacity: CloudCapacity
) -> CloudError | None:
    """Terminate one drained instance (its group shrinks by one). Returns the error, if any."""
    token = request_token(decision_id, instance.instance_id, "terminate")
    try:
        capacity.terminate(instance, token)
    except NotFoundError:
        return None
    except CloudError as err:
        return err
    return None
