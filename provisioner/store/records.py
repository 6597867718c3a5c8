"""The store's errors. The records it hands out, the lease and the fence its writes carry among
them, are domain types (`provisioner.domain.records`)."""

from __future__ import annotations

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


class ConcurrentUpdate(StoreError):
    """Someone else moved a watermark since it was read; nothing was written. Reading again
    and retrying is safe."""

    retryable = True


def _table(cls: type[Any]) -> Table:
    return cast(Table, cls.__table__)
