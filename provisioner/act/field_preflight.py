"""The port a cloud's field preflight implements: before anything is bought, check against the
cloud's real API that a pool's VMs can boot, read their secret and reach slurmctld. Each cloud's
adapter (act/field_aws.py, act/field_gcp.py) answers with `Check`s that name the resource and
the fix; `provisioner doctor` prints them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from provisioner.config.models import NodeBootstrap, PoolPolicy
from provisioner.domain.checks import Check
from provisioner.domain.errors import ProvisionerError
from provisioner.domain.reachability import Address, Ports


@dataclass(frozen=True, slots=True)
class SlurmNet:
    """Where the burst VMs must reach Slurm: slurmctld's address (None: `controller_host` does
    not resolve, so nothing is evaluated against it) and the live cluster's ports."""

    controller: Address | None
    slurmctld_port: int
    slurmd_port: int
    srun_ports: Ports


class FieldPreflight(Protocol):
    def check_pool(
        self,
        pool: PoolPolicy,
        node: NodeBootstrap,
        images: Mapping[str, str],  # region -> the image its VMs boot
        net: SlurmNet,
    ) -> list[Check]: ...


class Missing(ProvisionerError):
    """A resource the pool needs is missing or wrong: an adapter raises it inside its checks and
    turns it into a failing `Check` (its detail and fix); it never leaves the preflight."""

    def __init__(self, detail: str, fix: str) -> None:
        super().__init__(detail)
        self.detail = detail
        self.fix = fix
