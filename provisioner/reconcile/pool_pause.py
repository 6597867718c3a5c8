"""A cloud that denies a permission pauses the pool, with an alert.

No amount of waiting makes the cloud grant the controller (or the VM's instance role, or a
KMS key) an access it lacks: backing off and retrying as if capacity would return only repeats
the refusal and hides it. So the pool is drained (it takes no new nodes; running nodes are
left alone) under the controller's name, and a `pool_paused` decision carries the cloud's code
and message as an alert. An operator grants the access and undrains the pool
(`POST /v1/pools/{name}/undrain`); nothing undrains it by itself.
"""

from __future__ import annotations

import logging

from provisioner.domain.errors import AuthError, CloudError
from provisioner.domain.failures import error_code
from provisioner.domain.offers import OfferKey
from provisioner.domain.plan import Decision, ReasonCode, decision_id
from provisioner.ports.store import ControllerStore

log = logging.getLogger("provisioner.loop")

PAUSED_BY = "controller: the cloud denied a permission"


def pause_on_permission_error(
    store: ControllerStore, pool: str, offer: OfferKey, error: CloudError, now: float
) -> bool:
    """Pause `pool` if `error` is the cloud denying a permission; True when it did now."""
    if not isinstance(error, AuthError):
        return False
    info = store.pool(pool)
    if info is None or info.drained:
        return False
    store.set_pool_drained(pool, True, now, by=PAUSED_BY)
    code = error_code(error)
    reason = ReasonCode.POOL_PAUSED
    alert = Decision(
        decision_id(now, reason, pool),
        reason,
        chosen=offer,
        pool=pool,
        detail={"code": code, "error": str(error)[:500], "alert": "true", "undo": "undrain"},
    )
    store.record_decisions([alert], now)
    log.error("ALERT pool %s paused: the cloud denied a permission (%s): %s", pool, code, error)
    return True


__all__ = ["PAUSED_BY", "pause_on_permission_error"]
