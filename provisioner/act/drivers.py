"""Which `PoolDriver` runs: Pulumi where its CLI is installed, the cloud SDKs everywhere else."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from typing import Literal

from provisioner.act.ports import PoolDriver, PoolSpec
from provisioner.domain.errors import UnknownName

DriverKind = Literal["pulumi", "sdk"]
Which = Callable[[str], str | None]


class SdkPoolDriver:
    """Routes each spec to its cloud's SDK driver (`AwsPoolDriver`, `GcpPoolDriver`)."""

    def __init__(self, by_cloud: Mapping[str, PoolDriver]) -> None:
        self.by_cloud = dict(by_cloud)

    def _for(self, spec: PoolSpec) -> PoolDriver:
        try:
            return self.by_cloud[spec.cloud]
        except KeyError:
            raise UnknownName(f"no pool driver configured for cloud {spec.cloud!r}") from None

    def ensure(self, spec: PoolSpec) -> None:
        self._for(spec).ensure(spec)

    def delete(self, spec: PoolSpec) -> None:
        self._for(spec).delete(spec)


def driver_kind(which: Which = shutil.which) -> DriverKind:
    """Pulumi's Automation API needs the `pulumi` CLI (its engine); without it, use the SDKs."""
    return "pulumi" if which("pulumi") else "sdk"


def select_pool_driver(
    *,
    sdk: Callable[[], PoolDriver],
    pulumi: Callable[[], PoolDriver],
    which: Which = shutil.which,
) -> tuple[DriverKind, PoolDriver]:
    kind = driver_kind(which)
    return kind, (pulumi() if kind == "pulumi" else sdk())
