"""The error taxonomy. Failover is driven by the type, never by matching error text."""

from __future__ import annotations


class ProvisionerError(Exception):
    """Base of every error the provisioner raises on purpose."""


class ConfigError(ProvisionerError):
    """A config or input file is invalid. Names the file and the field."""

    def __init__(self, source: str, field: str, message: str) -> None:
        self.source = source
        self.field = field
        self.message = message
        where = f"{source}: {field}" if field else source
        super().__init__(f"{where}: {message}")


class InputError(ProvisionerError):
    """A data file (trace, snapshot, catalog) is unreadable. Names the file and the row/field."""


class SnapshotError(ProvisionerError):
    """Observation failed or was partial; the snapshot is stale."""


class CloudError(ProvisionerError):
    """A cloud call failed. Subclasses say what the controller should do about it."""

    retryable: bool = False
    backoff_offer: bool = False

    def __init__(self, message: str, *, code: str = "", offer: str = "") -> None:
        self.code = code
        self.offer = offer
        super().__init__(message)


class CapacityError(CloudError):
    """The cloud has no capacity for this offer now (InsufficientInstanceCapacity,
    ZONE_RESOURCE_POOL_EXHAUSTED). Back off the offer; the planner moves to the next one."""

    backoff_offer = True


class QuotaError(CloudError):
    """An account quota blocks the request. Back off the offer; retrying in place will not help."""

    backoff_offer = True


class ThrottlingError(CloudError):
    """The API asked us to slow down. Retry in place with backoff."""

    retryable = True


class TransientError(CloudError):
    """A network blip or 5xx. Retry in place."""

    retryable = True


class AuthError(CloudError):
    """Credentials are missing or denied. Never retried; an operator must act."""


class NotFoundError(CloudError):
    """The resource does not exist (already gone). Callers usually treat it as done."""
