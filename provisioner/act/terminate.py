"""A termination, from the plan's action to the cloud's answer: the intent written first, the
fence checked just before the call, then the record moved to terminating with the intent
confirmed (or the intent failed with the error's category). The group shrinks by one, so the
cloud does not replace the instance."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from provisioner.act.ports import CloudCapacity, CloudPorts, Hook, OwnedInstance, request_token
from provisioner.domain.errors import CloudError, NotFoundError
from provisioner.domain.failures import category_of, error_code
from provisioner.domain.instances import InstanceState
from provisioner.domain.intents import IntentKind, TerminatePayload
from provisioner.domain.records import NewIntent
from provisioner.ports.store import Fencing, InstanceRepo, IntentLog

# The loop's logger: these lines were always part of the pass's log stream.
log = logging.getLogger("provisioner.loop")

STEP_TERMINATE_AFTER_INTENT = "terminate.after_intent"
STEP_TERMINATE_AFTER_CLOUD = "terminate.after_cloud"

Move = tuple[str, InstanceState, str]


@dataclass(frozen=True, slots=True)
class TerminateResult:
    terminated: bool
    error: str = ""  # for the pass report


def terminate_instance(
    instance: OwnedInstance, decision_id: str, capacity: CloudCapacity
) -> CloudError | None:
    """Terminate one drained instance (its group shrinks by one). Returns the error, if any;
    an instance the cloud no longer has is no error."""
    token = request_token(decision_id, instance.instance_id, "terminate")
    return _terminate_with(instance, token, capacity)


def _terminate_with(
    instance: OwnedInstance, token: str, capacity: CloudCapacity
) -> CloudError | None:
    try:
        capacity.terminate(instance, token)
    except NotFoundError:
        return None
    except CloudError as err:
        return err
    return None


class TerminateStep:
    """Carries out terminations, intent first."""

    def __init__(
        self,
        *,
        clouds: Mapping[str, CloudPorts],
        intents: IntentLog,
        records: InstanceRepo,
        fence: Fencing,
        terminable: Collection[InstanceState],
        hook: Hook | None = None,
    ) -> None:
        self.clouds = clouds
        self.intents = intents
        self.records = records
        self.fence = fence
        self.terminable = terminable  # states a terminated record moves on from
        self._hook = hook

    def hook(self, step: str) -> None:
        if self._hook is not None:
            self._hook(step)

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
        si = self.records.instance(instance_id)
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
        self.fence.check_fence()
        err = _terminate_with(owned, token, ports.capacity)
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
        si = self.records.instance(instance_id)
        if si is None or si.instance.state not in self.terminable:
            return []
        return [(instance_id, InstanceState.TERMINATING, reason or "terminate")]
