"""The store's errors and the fence its writes carry. The records it hands out are domain types
(`provisioner.domain.records`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table


class StoreError(Exception):
    """A store operation could not be carried out as asked."""


class NotFound(StoreError):
    pass


class FencedOut(StoreError):
    """A write or an action carried a fencing token that is no longer the leader's."""


@dataclass(frozen=True, slots=True)
class Fence:
    """What a leader's writes carry: the lease, its holder and the token it was granted."""

    name: str
    holder: str
    token: int
    ttl_s: float


class ConcurrentUpdate(StoreError):
    """Someone else moved a watermark since it was read; nothing was written."""


def _table(cls: type[Any]) -> Table:
    return cast(Table, cls.__table__)
