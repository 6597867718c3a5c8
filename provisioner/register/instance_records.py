"""The slice of the store the Slurm side reads and moves: instance records and the fencing
check. A Protocol, so register/ does not import the store (`provisioner.store.Store` is one)."""

from __future__ import annotations

from typing import Protocol

from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.records import StoredInstance


class InstanceRecords(Protocol):
    def check_fence(self) -> None:
        """Refuse (FencedOut) unless this controller still holds the lease."""
        ...

    def instance(self, instance_id: str) -> StoredInstance | None: ...

    def instances(self) -> list[StoredInstance]: ...

    def transition(
        self,
        instance_id: str,
        to: InstanceState,
        at_ts: float,
        reason: str,
        *,
        cloud_ts: float | None = None,
    ) -> CloudInstance: ...
