"""The slice of the store the cloud actuator needs: intents written before each cloud call and
settled after it, the instance records a termination moves, and the fencing check. A Protocol,
so act/ does not import the store (`provisioner.store.Store` is one)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from provisioner.domain.failures import ErrorCategory
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.records import Intent, NewIntent, StoredInstance


class ActuatorStore(Protocol):
    def record_intent(self, intent: NewIntent) -> Intent: ...

    def confirm(
        self,
        token: str,
        now_ts: float,
        *,
        instances: Sequence[CloudInstance] = (),
        transitions: Sequence[tuple[str, InstanceState, str]] = (),
        result: Mapping[str, Any] | None = None,
        category: ErrorCategory = ErrorCategory.NONE,
    ) -> Intent: ...

    def fail_intent(
        self,
        token: str,
        now_ts: float,
        error_code: str,
        error: str = "",
        *,
        category: ErrorCategory | None = None,
    ) -> Intent: ...

    def instance(self, instance_id: str) -> StoredInstance | None: ...

    def check_fence(self) -> None:
        """Refuse (FencedOut) unless this controller still holds the lease."""
        ...
