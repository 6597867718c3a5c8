"""Recover: the intents a crashed pass left pending, settled at the start of the next pass.

Every cloud call is preceded by an intent in the store, so an intent still pending when a pass
starts means the controller stopped around that call: the cloud is asked whether it happened
(a scale-up: is the group at its target size? a termination: terminate again, idempotently).
"""

from __future__ import annotations

import logging

from provisioner.act.ports import CloudState, OwnedInstance
from provisioner.act.terminate import TerminateStep, terminate_instance
from provisioner.domain.errors import CloudError
from provisioner.domain.failures import ErrorCategory, category_of, error_code
from provisioner.domain.intents import IntentKind
from provisioner.domain.offers import OfferKey
from provisioner.domain.records import Intent
from provisioner.reconcile.context import PassContext, PassReport

log = logging.getLogger("provisioner.loop")

RECOVER = ErrorCategory.RECOVER


def recover_intents(
    ctx: PassContext, terminations: TerminateStep, now: float, report: PassReport
) -> None:
    """Intents still pending at the start of a pass were left by a pass that did not finish
    (a crash): find out from the cloud whether the call happened."""
    for it in ctx.store.pending_intents():
        try:
            if it.kind is IntentKind.SCALE_UP:
                _recover_scale_up(ctx, it, now)
            elif it.kind is IntentKind.TERMINATE:
                _recover_terminate(ctx, terminations, it, now)
            else:
                ctx.store.fail_intent(it.token, now, "unknown_kind", it.kind, category=RECOVER)
        except CloudError as err:
            report.errors.append(f"recover {it.token[:8]}: {error_code(err)}")
            log.warning("recovering intent %s failed: %s", it.token, err)


def _recover_scale_up(ctx: PassContext, it: Intent, now: float) -> None:
    pool = ctx.pool(it.pool)
    ports = ctx.deps.clouds.get(pool.cloud) if pool is not None else None
    spec = ctx.spec(pool, OfferKey.parse(it.offer), it.decision_id) if pool else None
    if pool is None or ports is None or spec is None:
        ctx.store.fail_intent(it.token, now, "recover:unknown_pool", it.pool, category=RECOVER)
        return
    status = ports.capacity.group_status(spec)
    target = it.scale_up_payload.target
    if status.exists and status.desired >= target > 0:
        ctx.store.confirm(
            it.token, now, result={"added": it.nodes, "target": target, "recovered": True}
        )
        log.info("recovered scale-up %s: the resize took effect", it.token)
    else:
        ctx.store.fail_intent(
            it.token,
            now,
            "recover:not_sent",
            "the controller stopped before the cloud call",
            category=RECOVER,
        )
        log.info("recovered scale-up %s: the resize never happened", it.token)


def _recover_terminate(
    ctx: PassContext, terminations: TerminateStep, it: Intent, now: float
) -> None:
    p = it.terminate_payload
    owned = OwnedInstance(
        instance_id=it.instance_id,
        cloud=p.cloud,
        region=p.region,
        zone=p.zone,
        instance_type=p.instance_type,
        state=CloudState.RUNNING,
        launched_ts=None,
        group=p.group,
    )
    ports = ctx.deps.clouds.get(owned.cloud)
    if ports is None:
        ctx.store.fail_intent(it.token, now, "recover:unknown_cloud", owned.cloud, category=RECOVER)
        return
    ctx.store.check_fence()
    err = terminate_instance(owned, it.decision_id, ports.capacity)
    if err is not None:
        ctx.store.fail_intent(it.token, now, error_code(err), str(err), category=category_of(err))
        return
    ctx.store.confirm(
        it.token, now, transitions=terminations.terminating_moves(it.instance_id, p.reason)
    )
    log.info("recovered termination of %s", it.instance_id)
