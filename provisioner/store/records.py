"""The store's errors and the fence its writes carry. The records it hands out are domain types
(`provisioner.domain.records`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table

from provisioner.domain.errors import ProvisionerError


class StoreError(ProvisionerError):
    """A store operation could not be carried out as asked."""

    http_status = 409


class NotFound(StoreError, LookupError):
    """No record with that key."""

    http_status = 404


class FencedOut(StoreError):
    """A write or an action carried a fencing token that is no longer the leader's. Never
    retried by the one who got it: that controller is no longer the leader."""

    http_status = 503


@dataclass(frozen=True, slots=True)
class Fence:
    """What a leader's writes carry: the lease, its holder and the token it was granted."""

    name: str
    holder: str
    token: int
    ttl_s: float


class ConcurrentUpdate(StoreError):
    """Someone else moved a watermark since it was read; nothing was written. Reading again
    and retrying is safe."""

    retryable = True


def _table(cls: type[Any]) -> Table:
    return cast(Table, cls.__table__)
