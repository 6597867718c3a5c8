"""`GET /healthz`."""

from __future__ import annotations

from typing import Literal

from provisioner.api.schemas.common import Out


class HealthOut(Out):
    status: Literal["ok"]


__all__ = ["HealthOut"]
