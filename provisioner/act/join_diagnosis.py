"""Why an instance did not join, asked of its cloud when the controller gives up on it: its
serial console, read through the cloud's `ConsoleReader` and told in one line
(domain/join_failures.py). Reading costs one call per join failure, and never blocks the
termination: a console the cloud cannot give yet is said so, and the instance still goes."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from provisioner.act.ports import CloudPorts, OwnedInstance
from provisioner.domain.errors import CloudError
from provisioner.domain.failures import error_code
from provisioner.domain.join_failures import diagnose

log = logging.getLogger("provisioner.loop")


class JoinDiagnosis:
    def __init__(self, clouds: Mapping[str, CloudPorts]) -> None:
        self.clouds = clouds

    def why(self, instance: OwnedInstance) -> str:
        """What the instance's console says about its join ("" when no console is kept)."""
        ports = self.clouds.get(instance.cloud)
        if ports is None or ports.console is None:
            return ""
        try:
            text = ports.console.console_output(instance)
        except CloudError as err:
            log.info("console of %s: %s", instance.instance_id, err)
            return f"console unreadable ({error_code(err)})"
        return diagnose(text) or "the console is empty"
