"""Register: make burst nodes part of the one Slurm cluster where no cloud-init does it (the
local slurmd launcher, or the demo's in-memory cluster), and acknowledge Slurm's power requests."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from provisioner.domain.errors import ProvisionerError
from provisioner.domain.instances import CloudInstance
from provisioner.reconcile.context import PassReport, ReconcilerDeps
from provisioner.register.handoff import process_power_requests

log = logging.getLogger("provisioner.loop")


class _AckHandler:
    """Controller-driven mode: Slurm's power requests are acknowledged; the node states the
    snapshot shows (powering up, powered down, down) drive the lifecycle instead."""

    def resume(self, nodes: Sequence[str]) -> None:
        log.debug("slurm resume request for %s (bound from the snapshot)", nodes)

    def suspend(self, nodes: Sequence[str]) -> None:
        log.debug("slurm suspend request for %s (terminated from the snapshot)", nodes)

    def resume_failed(self, nodes: Sequence[str]) -> None:
        log.info("slurm reports %s did not resume in time", nodes)


def register(deps: ReconcilerDeps, now: float, report: PassReport) -> None:
    """Boot/stop the nodes of bound instances (local launcher or the demo's cluster), and
    acknowledge Slurm's power requests."""
    deps.store.check_fence()
    if deps.launcher is not None:
        keep = now - 3600.0
        bound = [
            si.instance
            for si in deps.store.instances()
            if si.instance.node_name
            and (not si.instance.state.terminal or (si.ended_ts or now) >= keep)
        ]
        # a node name may have been held by an older instance: the newest record wins
        latest: dict[str, CloudInstance] = {}
        for inst in sorted(bound, key=lambda i: (i.launched_ts, i.instance_id)):
            latest[inst.node_name] = inst
        try:
            started, stopped = deps.launcher.sync(latest.values())
            if started or stopped:
                log.info("launcher: started %s, stopped %s", started, stopped)
        except ProvisionerError as exc:
            report.errors.append(f"launcher: {exc}")
    if deps.power_queue is not None:
        res = process_power_requests(deps.power_queue, _AckHandler(), now)
        for req, why in res.failed:
            report.errors.append(f"power request {req.request_id}: {why}")
