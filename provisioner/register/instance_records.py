"""The slice of the store the Slurm side reads and moves: instance records and the fencing
check, both ports of the store (`provisioner.ports.store`), so register/ never imports it."""

from __future__ import annotations

from typing import Protocol

from provisioner.ports.store import Fencing, InstanceRepo


class InstanceRecords(InstanceRepo, Fencing, Protocol):
    """Instance records, and the check made before each Slurm call."""
