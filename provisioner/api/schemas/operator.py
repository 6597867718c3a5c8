"""`GET /v1/operator` and the operator switches (`render.operator_dict`)."""

from __future__ import annotations

from provisioner.api.schemas.common import IsoTime, Out


class SweepOut(Out):
    """The orphan sweep's safety valve: held (and why, since when) and the last approval."""

    held: bool
    reason: str | None
    since: IsoTime | None
    approved_at: IsoTime | None
    approved_by: str | None


class OperatorOut(Out):
    paused: bool
    reason: str | None
    updated_at: IsoTime | None
    updated_by: str | None
    drained_pools: list[str]
    sweep: SweepOut


__all__ = ["OperatorOut", "SweepOut"]
