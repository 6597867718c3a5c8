"""The error taxonomy. Failover is driven by the type, never by matching error text."""

from __future__ import annotations


class ProvisionerError(Exception):
    """Base of every error the provisioner raises on purpose.

    What a caller does about one is read from its type and these attributes, never its text:
    - `retryable`: the same call may succeed later (a blip, a lost race); retry policies and
      the loop go by it.
    - `http_status`: what the API answers when the error reaches a request (api/errors.py maps
      every ProvisionerError in one place).
    - `user_message`: what a user or operator may be shown. It is the message, which names the
      file, field or request at fault and never holds a traceback or a server path.
    """

    retryable: bool = False
    http_status: int = 500

    @property
    def user_message(self) -> str:
        return str(self)


class InvalidArgument(ProvisionerError, ValueError):
    """A caller passed a value the function cannot work with (a negative age, an unknown
    policy name). Also a ValueError, so validators and older callers see what they expect."""

    http_status = 400


class NotKnown(ProvisionerError, LookupError):
    """Something asked for by name or id does not exist (a pool, a price, a record)."""

    http_status = 404


class UnknownName(NotKnown, KeyError):
    """The policy names no such pool, cloud driver or node image. Also a KeyError, as these
    lookups always raised one."""


class InvalidState(ProvisionerError, RuntimeError):
    """Something was called out of order (sampling before opening, migrating without
    revisions): a bug in the caller, not bad input."""


class ConfigError(ProvisionerError):
    """A config or input file is invalid. Names the file and the field."""

    http_status = 422

    def __init__(self, source: str, field: str, message: str) -> None:
        self.source = source
        self.field = field
        self.message = message
        where = f"{source}: {field}" if field else source
        super().__init__(f"{where}: {message}")


class InputError(ProvisionerError):
    """A data file (trace, snapshot, catalog) is unreadable. Names the file and the row/field."""

    http_status = 422


class SnapshotError(ProvisionerError):
    """Observation failed or was partial; the snapshot is stale. The next pass tries again."""

    retryable = True
    http_status = 503


class CloudError(ProvisionerError):
    """A cloud call failed. Subclasses say what the controller should do about it."""

    retryable: bool = False
    backoff_offer: bool = False
    http_status = 502

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


class LaunchError(CloudError):
    """The cloud took the request, then failed the launch for a reason of no finer class (its
    text is kept as given). Back off the offer: asking again every pass only repeats it."""

    backoff_offer = True


class LaunchSpecError(LaunchError):
    """The cloud refused what the launch asks for: an image that does not exist, an invalid
    parameter, a configuration it does not support. Waiting for capacity cannot help; an
    operator must change the pool."""


class ListingIncomplete(CloudError):
    """The cloud answered a listing only in part (zones it could not reach). What it did list
    is not the whole truth, so no instance may be taken as gone from it."""


class NotFoundError(CloudError):
    """The resource does not exist (already gone). Callers usually treat it as done."""
