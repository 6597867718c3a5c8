"""Make burst nodes part of the one Slurm cluster where no cloud-init does it (the local slurmd
launcher, or the demo's in-memory cluster), and acknowledge Slurm's power requests."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from provisioner.domain.errors import ProvisionerError
from provisioner.domain.instances import CloudInstance
from provisioner.register.handoff import process_power_requests
from provisioner.register.instance_records import InstanceRecords
from provisioner.register.ports import NodeLauncher
from provisioner.register.power_queue import PowerRequestQueue

# The loop's logger: these lines were always part of the pass's log stream.
log = logging.getLogger("provisioner.loop")

_BOUND_WINDOW_S = 3600.0  # closed records still handed to the launcher, so it stops their nodes


class _AckHandler:
    """Controller-driven mode: Slurm's power requests are acknowledged; the node states the
    snapshot shows (powering up, powered down, down) drive the lifecycle instead."""

    def resume(self, nodes: Sequence[str]) -> None:
        log.debug("slurm resume request for %s (bound from the snapshot)", nodes)

    def suspend(self, nodes: Sequence[str]) -> None:
        log.debug("slurm suspend request for %s (terminated from the snapshot)", nodes)

    def resume_failed(self, nodes: Sequence[str]) -> None:
        log.info("slurm reports %s did not resume in time", nodes)


class NodeSync:
    def __init__(
        self,
        *,
        records: InstanceRecords,
        launcher: NodeLauncher | None = None,
        power_queue: PowerRequestQueue | None = None,
    ) -> None:
        self.records = records
        self.launcher = launcher
        self.power_queue = power_queue

    def sync(self, now: float) -> tuple[str, ...]:
        """Boot/stop the nodes of bound instances and acknowledge Slurm's power requests.
        Returns the errors for the pass report."""
        self.records.check_fence()
        errors: list[str] = []
        if self.launcher is not None:
            keep = now - _BOUND_WINDOW_S
            bound = [
                si.instance
                for si in self.records.instances()
                if si.instance.node_name
                and (not si.instance.state.terminal or (si.ended_ts or now) >= keep)
            ]
            # a node name may have been held by an older instance: the newest record wins
            latest: dict[str, CloudInstance] = {}
            for inst in sorted(bound, key=lambda i: (i.launched_ts, i.instance_id)):
                latest[inst.node_name] = inst
            try:
                started, stopped = self.launcher.sync(latest.values())
                if started or stopped:
                    log.info("launcher: started %s, stopped %s", started, stopped)
            except ProvisionerError as exc:
                errors.append(f"launcher: {exc}")
        if self.power_queue is not None:
            res = process_power_requests(self.power_queue, _AckHandler(), now)
            for req, why in res.failed:
                errors.append(f"power request {req.request_id}: {why}")
        return tuple(errors)
