"""The cloud side of a pass: scale-ups tried over the planner's offer and its fallbacks, and
terminations. Each call has its intent written first and the fence checked just before it;
the outcomes feed the per-offer back-off. What a call did is handed back as a value: the
reconcile coordinator adds it to the pass report and does what follows in Slurm.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from provisioner.act.actuator import (
    CloudPorts,
    ScaleUpOutcome,
    scale_up_with_fallback,
    terminate_instance,
)
from provisioner.act.actuator_store import ActuatorStore
from provisioner.act.backoff_feed import BackoffSettings
from provisioner.act.pool_specs import OfferSpecs
from provisioner.act.ports import OwnedInstance, PoolSpec, request_token
from provisioner.config.models import PoolPolicy
from provisioner.domain.errors import UnknownName
from provisioner.domain.failures import ErrorCategory, category_of, error_code
from provisioner.domain.instances import InstanceState
from provisioner.domain.intents import IntentKind, ScaleUpPayload, TerminatePayload
from provisioner.domain.offers import OfferKey
from provisioner.domain.plan import ScaleUp
from provisioner.domain.records import NewIntent
from provisioner.plan.backoff import Backoff

# The loop's logger: these lines were always part of the pass's log stream.
log = logging.getLogger("provisioner.loop")

# Where a crash matters; the hook is called at each (tests raise or SIGKILL there).
STEP_SCALE_UP_AFTER_INTENT = "scale_up.after_intent"
STEP_SCALE_UP_AFTER_CLOUD = "scale_up.after_cloud"
STEP_TERMINATE_AFTER_INTENT = "terminate.after_intent"
STEP_TERMINATE_AFTER_CLOUD = "terminate.after_cloud"

Hook = Callable[[str], None]
Move = tuple[str, InstanceState, str]


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


@dataclass(frozen=True, slots=True)
class TerminateResult:
    terminated: bool
    error: str = ""  # for the pass report


class CloudActuator:
    """Holds the per-offer back-off, the one piece of state a scale-up changes."""

    def __init__(
        self,
        *,
        clouds: Mapping[str, CloudPorts],
        intents: ActuatorStore,
        specs: OfferSpecs,
        settings: BackoffSettings,
        backoff: Backoff,
        terminable: Collection[InstanceState],
        hook: Hook | None = None,
    ) -> None:
        self.clouds = clouds
        self.intents = intents
        self.specs = specs
        self.settings = settings
        self.backoff = backoff
        self.terminable = terminable  # states a terminated record moves on from
        self._hook = hook

    def hook(self, step: str) -> None:
        if self._hook is not None:
            self._hook(step)

    def ports(self, cloud: str) -> CloudPorts | None:
        return self.clouds.get(cloud)

    # ------------------------------------------------------------------ scale-up

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
        did = su.decision.decision_id
        team = su.decision.team or pool.team
        tokens: dict[OfferKey, str] = {}

        def record(spec: PoolSpec, target: int, token: str) -> None:
            before = ports.capacity.group_status(spec).desired
            offer = self.specs.offer(spec.offer)
            price = offer.price(spec.capacity) if offer is not None else None
            self.intents.record_intent(
                NewIntent(
                    IntentKind.SCALE_UP,
                    token,
                    now,
                    pool=pool.name,
                    offer=spec.offer,
                    nodes=max(0, target - before),
                    decision_id=did,
                    team=team,
                    price_usd_hr=price,
                    payload=ScaleUpPayload(
                        target=target,
                        group=spec.group_name,
                        gpus=spec.gpus,
                        gpu_model=spec.gpu_model,
                        jobs=su.job_ids,
                    ),
                )
            )
            tokens[spec.offer] = token
            self.hook(STEP_SCALE_UP_AFTER_INTENT)
            self.intents.check_fence()  # a controller that lost the lease stops before the call

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
        placed = {p.token for p in outcome.placed}
        partial = {f.offer: f.error for f in outcome.failed}
        for p in outcome.placed:
            result: dict[str, Any] = {"added": p.added, "target": p.target, "group": p.group}
            category = ErrorCategory.NONE
            if p.offer in partial:  # filled in part: the shortfall's error backs the offer off
                result["shortfall_code"] = error_code(partial[p.offer])
                category = category_of(partial[p.offer])
            self.intents.confirm(p.token, now, result=result, category=category)
        for f in outcome.failed:
            tok = tokens.get(f.offer)
            code, category = error_code(f.error), category_of(f.error)
            if tok is None:
                self._failed_without_call(su, code, category, now, str(f.error), f.offer)
            elif tok not in placed:
                self.intents.fail_intent(tok, now, code, str(f.error), category=category)
        return ScaleUpResult(pool, ports, outcome)

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

    # ------------------------------------------------------------------ terminate

    def terminate(
        self,
        instance_id: str,
        owned: OwnedInstance,
        reason: str,
        decision_id: str,
        now: float,
        *,
        transition: bool = True,
    ) -> TerminateResult:
        """Terminate one instance, intent first. `transition`: move its record to
        terminating (False for a record already closed, or an orphan without one)."""
        ports = self.clouds.get(owned.cloud)
        if ports is None:
            return TerminateResult(False, f"terminate {instance_id}: no port for {owned.cloud}")
        token = request_token(decision_id, instance_id, "terminate")
        si = self.intents.instance(instance_id)
        self.intents.record_intent(
            NewIntent(
                IntentKind.TERMINATE,
                token,
                now,
                pool=si.instance.pool if si else str(owned.pool),
                instance_id=instance_id,
                decision_id=decision_id,
                payload=TerminatePayload(
                    reason=reason,
                    cloud=owned.cloud,
                    region=owned.region,
                    zone=owned.zone,
                    instance_type=owned.instance_type,
                    group=owned.group,
                ),
            )
        )
        self.hook(STEP_TERMINATE_AFTER_INTENT)
        self.intents.check_fence()
        err = terminate_instance(owned, decision_id, ports.capacity)
        if err is not None:
            code = error_code(err)
            self.intents.fail_intent(token, now, code, str(err), category=category_of(err))
            return TerminateResult(False, f"terminate {instance_id}: {code}")
        self.hook(STEP_TERMINATE_AFTER_CLOUD)
        moves = self.terminating_moves(instance_id, reason) if transition else []
        self.intents.confirm(token, now, transitions=moves)
        log.info("terminated %s: %s", instance_id, reason)
        return TerminateResult(True)

    def terminating_moves(self, instance_id: str, reason: str) -> list[Move]:
        """The step to `terminating` for a record still live (none for a closed or unknown one)."""
        si = self.intents.instance(instance_id)
        if si is None or si.instance.state not in self.terminable:
            return []
        return [(instance_id, InstanceState.TERMINATING, reason or "terminate")]
