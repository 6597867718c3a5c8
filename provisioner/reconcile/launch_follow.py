"""Follow each recent scale-up until its instances run or the cloud gives up on them.

A real group reports a failed launch tens of seconds after the resize (AWS: a `Failed` scaling
activity; GCE: `lastAttempt.errors` on a managed instance), long after the scale-up was
confirmed. Until the cloud says so, the nodes count as requested (`snapshot_view.placeholders`),
so the planner does not buy them twice. Once it says so:

- the group is shrunk to what it holds: otherwise it fills behind the planner's back when
  capacity returns, on top of what the planner bought elsewhere meanwhile;
- the offer is backed off, so this pass's plan moves to a fallback;
- the intent's count drops to what launched, so the placeholders stop counting the rest;
- a `launch_failed` decision says which offer, how many nodes and the cloud's own words.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from provisioner.act.backoff_feed import BackoffSettings, record_error
from provisioner.act.scale_up import settle_fill
from provisioner.domain.errors import AuthError, CloudError
from provisioner.domain.failures import category_of, error_code
from provisioner.domain.intents import IntentKind, IntentStatus
from provisioner.domain.offers import OfferKey
from provisioner.domain.plan import Decision, ReasonCode, decision_id
from provisioner.domain.records import Intent
from provisioner.plan.backoff import Backoff
from provisioner.reconcile.context import PassContext, PassReport
from provisioner.reconcile.pool_pause import pause_on_permission_error
from provisioner.reconcile.snapshot_view import seen_by_intent

log = logging.getLogger("provisioner.loop")


def follow_launches(
    ctx: PassContext, backoff: Backoff, settings: BackoffSettings, now: float, report: PassReport
) -> Backoff:
    """Settle the scale-ups whose launches the cloud failed since they were confirmed; the
    back-off those failures imply is returned."""
    seen = seen_by_intent(ctx)
    since = now - ctx.config.placeholder_s
    for it in ctx.store.intents(
        kind=IntentKind.SCALE_UP, status=IntentStatus.CONFIRMED, since_ts=since
    ):
        if it.result.get("shortfall_code") or it.result.get("recovered"):
            continue  # its shortfall is already known, or recovery could not count it
        missing = int(it.result.get("added", 0) or 0) - seen.get(it.token, 0)
        if missing > 0:
            backoff = _follow(ctx, it, missing, backoff, settings, now, report)
    return backoff


def _follow(
    ctx: PassContext,
    it: Intent,
    missing: int,
    backoff: Backoff,
    settings: BackoffSettings,
    now: float,
    report: PassReport,
) -> Backoff:
    pool = ctx.pool(it.pool)
    ports = ctx.deps.clouds.get(pool.cloud) if pool is not None else None
    key = OfferKey.parse(it.offer)
    spec = ctx.spec(pool, key, it.decision_id) if pool is not None else None
    if ports is None or spec is None:
        return backoff
    # The resize came after its intent was recorded: no outcome older than that (on the
    # cloud's clock) is this request's, even where the adapter forgot the request (a restart).
    skew = ctx.skews.skew_by_cloud().get(key.cloud, 0.0)
    spec = replace(spec, requested_ts=it.created_ts + skew)
    ctx.store.check_fence()  # the shrink below is a cloud call: only the leader makes it
    try:
        fill = settle_fill(spec, ports.capacity)
    except CloudError as err:
        report.errors.append(f"follow {it.token[:8]}: {error_code(err)}")
        return backoff
    if fill is None:
        return backoff  # still launching, or launched: nothing the cloud gave up on
    lost = min(missing, fill.shrunk_from - fill.launched)
    code = error_code(fill.error)
    ctx.store.late_shortfall(
        it.token,
        now,
        missing=lost,
        code=code,
        error=str(fill.error),
        category=category_of(fill.error),
    )
    reason = ReasonCode.LAUNCH_FAILED
    detail = {
        "offer": str(key),
        "group": spec.group_name,
        "nodes_lost": str(lost),
        "code": code,
        "error": str(fill.error)[:500],
        "intent": it.token,
    }
    if isinstance(fill.error, AuthError):
        detail["alert"] = "true"  # no capacity will fix it: an operator must grant the access
    failed = Decision(
        decision_id(now, reason, it.token),
        reason,
        chosen=key,
        team=it.team,
        pool=it.pool,
        detail=detail,
    )
    ctx.store.record_decisions([failed], now)
    pause_on_permission_error(ctx.store, it.pool, key, fill.error, now)
    msg = f"launch failed late in {spec.group_name}: {lost} node(s) will not come ({code})"
    log.warning("%s: %s", msg, fill.error)
    report.warnings.append(msg)
    return record_error(backoff, key, fill.error, now, settings)
