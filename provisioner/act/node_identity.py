"""Naming an instance's Slurm node on the instance itself: the step that carries out sync's
`NameNode` actions. The instance's join program reads the name from its own metadata service
(`infra/bootstrap/gpu-burst-join.py`), so each VM learns which node it is from the cloud's
record of that one instance, never from its hostname or its boot order.

Tagging is idempotent and costs nothing, so it has no intent: a name the cloud did not take is
named again on the next pass (sync sees the listing without it). The fence is checked first, as
before every cloud call.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from provisioner.act.ports import CloudPorts, OwnedInstance
from provisioner.domain.errors import CloudError
from provisioner.domain.failures import error_code
from provisioner.ports.store import Fencing

log = logging.getLogger("provisioner.loop")


class NameNodeStep:
    def __init__(self, *, clouds: Mapping[str, CloudPorts], fence: Fencing) -> None:
        self.clouds = clouds
        self.fence = fence

    def name(self, instance: OwnedInstance, node: str) -> str:
        """ "" once the cloud holds the name, else the error for the pass report."""
        ports = self.clouds.get(instance.cloud)
        if ports is None:
            return f"name {instance.instance_id}: no port for {instance.cloud}"
        self.fence.check_fence()
        try:
            ports.capacity.name_node(instance, node)
        except CloudError as err:
            return f"name {instance.instance_id} as {node}: {error_code(err)}"
        log.info("named %s slurm node %s", instance.instance_id, node)
        return ""
