"""The slices of Slurm the reconcile loop drives, as small ports.

`NodeControl` is what `provisioner.register.slurm_control.SlurmControl` already offers (the loop
uses only these methods); `JobControl` adds one job update the loop needs: widening a pending
job's partition list so Slurm may place it on burst nodes once the planner decided to burst it.
`NodeLauncher` plays the cloud VM boot where there is no real cloud-init (the local slurmd
launcher, or the demo's in-memory cluster). The demo's fake cluster implements all three.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from provisioner.command_runner import CommandResult, CommandRunner, CommandTimeout
from provisioner.domain.instances import CloudInstance
from provisioner.register.slurm_control import SlurmControlError


class NodeControl(Protocol):
    def drain_and_power_down(self, nodes: str | Iterable[str], reason: str) -> None: ...

    def force_power_down(self, nodes: str | Iterable[str], reason: str) -> None: ...

    def mark_failed(self, nodes: str | Iterable[str], reason: str) -> tuple[str, ...]: ...

    def resume(self, nodes: str | Iterable[str]) -> None: ...


class JobControl(Protocol):
    def set_partitions(self, job_id: str, partitions: Sequence[str]) -> None:
        """Set a pending job's partition list (e.g. `onprem` -> `onprem,cloud`)."""
        ...


class NodeLauncher(Protocol):
    def sync(self, instances: Iterable[CloudInstance]) -> tuple[list[str], list[str]]:
        """Boot the nodes of running instances, stop those of instances going away.
        Returns (started, stopped) node names."""
        ...


class ScontrolJobControl:
    """`scontrol update jobid=<id> partition=<a,b>` through the injected runner."""

    def __init__(
        self, runner: CommandRunner, *, timeout_s: float = 15.0, scontrol: str = "scontrol"
    ) -> None:
        self._runner = runner
        self._timeout_s = timeout_s
        self._scontrol = scontrol

    def set_partitions(self, job_id: str, partitions: Sequence[str]) -> None:
        parts = [p for p in partitions if p]
        if not job_id or not job_id.replace("_", "").isalnum() or not parts:
            raise ValueError(f"bad job update: {job_id!r} -> {partitions!r}")
        if any(not p.replace("-", "").replace("_", "").isalnum() for p in parts):
            raise ValueError(f"bad partition names: {parts!r}")
        argv = [self._scontrol, "update", f"jobid={job_id}", f"partition={','.join(parts)}"]
        try:
            res: CommandResult = self._runner.run(argv, timeout_s=self._timeout_s)
        except CommandTimeout as exc:
            raise SlurmControlError(str(exc), argv=argv) from None
        except OSError as exc:
            raise SlurmControlError(f"`{' '.join(argv)}` could not run: {exc}", argv=argv) from None
        if not res.ok:
            raise SlurmControlError(res.describe(), argv=argv, returncode=res.returncode)
