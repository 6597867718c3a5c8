"""The slices of Slurm the registrar drives, as small ports.

`NodeControl` is what `provisioner.register.slurm_control.SlurmControl` already offers (only
these methods are used); `JobControl` adds one job update: widening a pending job's partition
list so Slurm may place it on burst nodes once the planner decided to burst it.
`NodeLauncher` plays the cloud VM boot where there is no real cloud-init (the local slurmd
launcher, or the demo's in-memory cluster). The demo's fake cluster implements all three.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from provisioner.domain.instances import CloudInstance


class NodeControl(Protocol):
    def drain_and_power_down(self, nodes: str | Iterable[str], reason: str) -> None: ...

    def force_power_down(self, nodes: str | Iterable[str], reason: str) -> None: ...

    def mark_failed(self, nodes: str | Iterable[str], reason: str) -> tuple[str, ...]: ...

    def warn_jobs(self, nodes: str | Iterable[str], signal: str, reason: str) -> tuple[str, ...]:
        """Drain the nodes and send their running jobs `signal` ("" none); the jobs' ids."""
        ...

    def resume(self, nodes: str | Iterable[str]) -> None: ...

    def set_address(self, node: str, address: str, hostname: str | None = None) -> None: ...


class JobControl(Protocol):
    def set_partitions(self, job_id: str, partitions: Sequence[str]) -> None:
        """Set a pending job's partition list (e.g. `onprem` -> `onprem,cloud`)."""
        ...

    def release(self, job_id: str) -> None:
        """Release a held pending job (`scontrol release`)."""
        ...


class NodeLauncher(Protocol):
    def sync(self, instances: Iterable[CloudInstance]) -> tuple[list[str], list[str]]:
        """Boot the nodes of running instances, stop those of instances going away.
        Returns (started, stopped) node names."""
        ...
