"""How a failed cloud call is kept on its intent: the category of the typed error (a column of
its own, which the per-offer back-off is rebuilt from) and a structured code
`<category>:<cloud code>` for people and counts. Never derived from the error's text."""

from __future__ import annotations

from enum import StrEnum

from provisioner.domain.errors import (
    AuthError,
    CapacityError,
    CloudError,
    LaunchError,
    LaunchSpecError,
    NotFoundError,
    QuotaError,
    ThrottlingError,
    TransientError,
)


class ErrorCategory(StrEnum):
    NONE = ""  # the outcome is recorded and met no error
    CAPACITY = "capacity"
    QUOTA = "quota"
    THROTTLING = "throttling"
    TRANSIENT = "transient"
    AUTH = "auth"
    NOT_FOUND = "not_found"
    LAUNCH = "launch"  # the cloud failed a launch it had taken, for a reason of no finer class
    LAUNCH_SPEC = "launch_spec"  # the cloud refused the launch's image, parameters or shape
    ERROR = "error"  # a cloud error of no finer class
    CONFIG = "config"  # failed before any cloud call: no cloud port, no boot image
    RECOVER = "recover"  # settled by recovery after a crash

    @property
    def backs_off(self) -> bool:
        """The offer itself is the problem: the next pass tries another one."""
        return self in (
            ErrorCategory.CAPACITY,
            ErrorCategory.QUOTA,
            ErrorCategory.LAUNCH,
            ErrorCategory.LAUNCH_SPEC,
        )

    @classmethod
    def parse(cls, raw: str | None) -> ErrorCategory | None:
        """The stored category; None for NULL (not recorded). One this version does not know
        reads as ERROR, which backs nothing off."""
        if raw is None:
            return None
        try:
            return cls(raw)
        except ValueError:
            return cls.ERROR


_CLASSES: tuple[tuple[type[CloudError], ErrorCategory], ...] = (
    (CapacityError, ErrorCategory.CAPACITY),
    (QuotaError, ErrorCategory.QUOTA),
    (ThrottlingError, ErrorCategory.THROTTLING),
    (TransientError, ErrorCategory.TRANSIENT),
    (AuthError, ErrorCategory.AUTH),
    (NotFoundError, ErrorCategory.NOT_FOUND),
    (LaunchSpecError, ErrorCategory.LAUNCH_SPEC),  # before its base class
    (LaunchError, ErrorCategory.LAUNCH),
)


def category_of(err: CloudError) -> ErrorCategory:
    """The taxonomy class of a failed cloud call."""
    return next((cat for cls, cat in _CLASSES if isinstance(err, cls)), ErrorCategory.ERROR)


def error_code(err: CloudError) -> str:
    """A structured code for a failed cloud call: `<category>:<cloud code>`."""
    return f"{category_of(err)}:{err.code or type(err).__name__}"[:64]
