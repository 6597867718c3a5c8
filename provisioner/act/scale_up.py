"""A scale-up, from the plan's action to the cloud's answer: the chosen offer, then the planner's
fallbacks, each resize with its intent written first and the fence checked just before it, and
the outcomes fed to the per-offer back-off.

A capacity or quota error (raised, or reported by the group for the instances it could not
launch) backs the offer off and moves the remainder to the next offer. Throttling and transient
errors were already retried inside the adapters by the one retry policy. What the calls did is
handed back as a value; the reconcile loop adds it to the pass report and moves the jobs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from provisioner.act.backoff_feed import BackoffSettings, record_error, record_success
from provisioner.act.pool_specs import OfferSpecs
from provisioner.act.ports import CloudCapacity, CloudPorts, Hook, PoolSpec, request_token
from provisioner.config.models import PoolPolicy
from provisioner.domain.errors import CloudError, UnknownName
from provisioner.domain.failures import ErrorCategory, category_of, error_code
from provisioner.domain.intents import IntentKind, ScaleUpPayload
from provisioner.domain.offers import OfferKey
from provisioner.domain.plan import ScaleUp
from provisioner.domain.records import NewIntent
from provisioner.plan.backoff import Backoff
from provisioner.ports.store import Fencing, IntentLog

# The loop's logger: these lines were always part of the pass's log stream.
log = logging.getLogger("provisioner.loop")
fill_log = logging.getLogger(__name__)  # the cloud-side lines, below the pass's own

# Where a crash matters; the hook is called at each (tests raise or SIGKILL there).
STEP_SCALE_UP_AFTER_INTENT = "scale_up.after_intent"
STEP_SCALE_UP_AFTER_CLOUD = "scale_up.after_cloud"

IntentRecorder = Callable[[PoolSpec, int, str], None]


@dataclass(frozen=True, slots=True)
class Placed:
    offer: OfferKey
    group: str
    added: int
    target: int
    token: str


@dataclass(frozen=True, slots=True)
class Failed:
    """An offer that failed, with its error classified once, where it was caught."""

    offer: OfferKey
    error: CloudError
    code: str
    category: ErrorCategory

    @classmethod
    def of(cls, offer: OfferKey, error: CloudError) -> Failed:
        return cls(offer, error, error_code(error), category_of(error))


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


@dataclass(frozen=True, slots=True)
class ScaleUpResult:
    """One scale-up: the pool and ports it used, the outcome of its cloud calls (None: it
    failed before any call) and the errors for the pass report."""

    pool: PoolPolicy | None
    ports: CloudPorts | None
    outcome: ScaleUpOutcome | None = None
    errors: tuple[str, ...] = ()

    @property
    def placed_nodes(self) -> int:
        return self.outcome.placed_nodes if self.outcome is not None else 0


# --------------------------------------------------------------------------- the cloud calls


def settle_fill(spec: PoolSpec, capacity: CloudCapacity) -> FillCheck | None:
    """When the group reports a launch failure for its shortfall, shrink it to what it holds.

    Otherwise the cloud keeps retrying the launch in the background and may fill it much later,
    after the planner has placed those nodes elsewhere. Also for later reconcile passes."""
    status = capacity.group_status(spec)
    if status.failure is None or status.shortfall == 0:
        return None
    token = request_token(spec.decision_id, spec.group_name, "shrink", status.launched)
    capacity.resize(spec, status.launched, token)
    fill_log.warning(
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
    """Add `nodes` nodes, trying `specs` (one per offer, best first) in order. `record_intent`
    is called before each resize, so the store can write the intent first.

    Each offer appears once in `specs` (the planner's fallbacks never repeat an offer), and a
    try changes the back-off of its own offer only: the offers blocked at the start are the
    ones blocked at each try."""
    settings = settings or BackoffSettings()
    blocked = backoff.blocked_at(now_ts)
    remaining = nodes
    placed: list[Placed] = []
    failed: list[Failed] = []
    skipped: list[OfferKey] = []
    for spec in specs:
        if remaining <= 0:
            break
        key = spec.offer
        if key in blocked:
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
            fill_log.warning("offer %s failed: %s (%s)", key, type(err).__name__, err.code)
            failed.append(Failed.of(key, err))
            backoff = record_error(backoff, key, err, now_ts, settings)
            continue
        if fill is None:
            added = target - before.desired
            backoff = record_success(backoff, key)
        else:  # partially filled: keep what launched, back the offer off, move on
            added = max(0, fill.launched - before.desired)
            target = fill.launched
            failed.append(Failed.of(key, fill.error))
            backoff = record_error(backoff, key, fill.error, now_ts, settings)
        if added > 0:
            placed.append(Placed(key, spec.group_name, added, target, token))
            remaining -= added
    return ScaleUpOutcome(nodes, tuple(placed), tuple(failed), tuple(skipped), backoff)


# --------------------------------------------------------------------------- intent first


class ScaleUpStep:
    """Carries out the plan's scale-ups. Holds the per-offer back-off, the one piece of state a
    scale-up changes."""

    def __init__(
        self,
        *,
        clouds: Mapping[str, CloudPorts],
        intents: IntentLog,
        fence: Fencing,
        specs: OfferSpecs,
        settings: BackoffSettings,
        backoff: Backoff,
        hook: Hook | None = None,
    ) -> None:
        self.clouds = clouds
        self.intents = intents
        self.fence = fence
        self.specs = specs
        self.settings = settings
        self.backoff = backoff
        self._hook = hook

    def hook(self, step: str) -> None:
        if self._hook is not None:
            self._hook(step)

    def scale_up(self, su: ScaleUp, now: float) -> ScaleUpResult:
        pool = self.specs.pool(su.pool)
        ports = self.clouds.get(pool.cloud) if pool is not None else None
        if pool is None or ports is None:
            self._failed_without_call(su, "config:no_cloud_port", ErrorCategory.CONFIG, now)
            return ScaleUpResult(pool, ports, errors=(f"scale-up {su.pool}: no cloud port",))
        try:
            specs = self._fallback_specs(su, pool)
        except UnknownName as exc:  # no boot image configured for the region
            self._failed_without_call(su, "config:no_image", ErrorCategory.CONFIG, now, str(exc))
            return ScaleUpResult(pool, ports, errors=(f"scale-up {su.pool}: {exc}",))
        tokens: dict[OfferKey, str] = {}

        def record(spec: PoolSpec, target: int, token: str) -> None:
            self._record_intent(su, pool, ports, spec, target, token, now)
            tokens[spec.offer] = token

        outcome = scale_up_with_fallback(
            specs,
            su.nodes,
            ports={pool.cloud: ports},
            backoff=self.backoff,
            now_ts=now,
            settings=self.settings,
            record_intent=record,
        )
        self.hook(STEP_SCALE_UP_AFTER_CLOUD)
        self.backoff = outcome.backoff
        self._settle(su, outcome, tokens, now)
        return ScaleUpResult(pool, ports, outcome)

    def _record_intent(
        self,
        su: ScaleUp,
        pool: PoolPolicy,
        ports: CloudPorts,
        spec: PoolSpec,
        target: int,
        token: str,
        now: float,
    ) -> None:
        """The intent of one resize, written before it; then the fence, so a controller that
        lost the lease stops before the call."""
        before = ports.capacity.group_status(spec).desired
        offer = self.specs.offer(spec.offer)
        self.intents.record_intent(
            NewIntent(
                IntentKind.SCALE_UP,
                token,
                now,
                pool=pool.name,
                offer=spec.offer,
                nodes=max(0, target - before),
                decision_id=su.decision.decision_id,
                team=su.decision.team or pool.team,
                price_usd_hr=offer.price(spec.capacity) if offer is not None else None,
                payload=ScaleUpPayload(
                    target=target,
                    group=spec.group_name,
                    gpus=spec.gpus,
                    gpu_model=spec.gpu_model,
                    jobs=su.job_ids,
                ),
            )
        )
        self.hook(STEP_SCALE_UP_AFTER_INTENT)
        self.fence.check_fence()

    def _settle(
        self, su: ScaleUp, outcome: ScaleUpOutcome, tokens: Mapping[OfferKey, str], now: float
    ) -> None:
        """Confirm the intents of the resizes that placed nodes, fail the rest."""
        placed = {p.token for p in outcome.placed}
        partial = {f.offer: f for f in outcome.failed}
        for p in outcome.placed:
            result: dict[str, Any] = {"added": p.added, "target": p.target, "group": p.group}
            category = ErrorCategory.NONE
            if p.offer in partial:  # filled in part: the shortfall's error backs the offer off
                result["shortfall_code"] = partial[p.offer].code
                category = partial[p.offer].category
            self.intents.confirm(p.token, now, result=result, category=category)
        for f in outcome.failed:
            tok = tokens.get(f.offer)
            if tok is None:
                self._failed_without_call(su, f.code, f.category, now, str(f.error), f.offer)
            elif tok not in placed:
                self.intents.fail_intent(tok, now, f.code, str(f.error), category=f.category)

    def _fallback_specs(self, su: ScaleUp, pool: PoolPolicy) -> list[PoolSpec]:
        """The chosen offer, then the fallbacks the planner chose, as pool specs."""
        specs = []
        for key in (su.offer, *su.fallbacks):
            spec = self.specs.spec(pool, key, su.decision.decision_id)
            if spec is not None:
                specs.append(spec)
        return specs

    def _failed_without_call(
        self,
        su: ScaleUp,
        code: str,
        category: ErrorCategory,
        now: float,
        error: str = "",
        offer: OfferKey | None = None,
    ) -> None:
        """A scale-up that failed before any resize (no group, no image): kept as a failed
        intent, so the failure is counted and, for capacity/quota, backs the offer off."""
        key = offer or su.offer
        token = request_token(su.decision.decision_id, str(key), "not-sent")
        self.intents.record_intent(
            NewIntent(
                IntentKind.SCALE_UP,
                token,
                now,
                pool=su.pool,
                offer=key,
                nodes=0,
                decision_id=su.decision.decision_id,
                team=su.decision.team,
                payload=ScaleUpPayload(jobs=su.job_ids),
            )
        )
        self.intents.fail_intent(token, now, code, error, category=category)
