"""Intents: what the controller is about to ask a cloud, written to the store before the call.

The kind and status are kept as the same strings as ever. Each kind's payload is a frozen
dataclass with its JSON form; reading is lenient (missing keys take defaults, unknown keys are
ignored), so payloads written by older versions still load.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class IntentKind(StrEnum):
    SCALE_UP = "scale_up"
    TERMINATE = "terminate"

    @classmethod
    def _missing_(cls, value: object) -> IntentKind | None:
        # A kind this version does not know (written by a newer controller, or by hand) is
        # kept verbatim instead of failing the read, so recovery can settle and name it.
        if not isinstance(value, str):
            return None
        member = str.__new__(cls, value)
        member._name_ = value.upper()
        member._value_ = value
        return member


class IntentStatus(StrEnum):
    PENDING = "pending"
    CONFIRMED = "confirmed"
    FAILED = "failed"


def _int(data: Mapping[str, Any], key: str) -> int:
    return int(data.get(key, 0) or 0)


def _str(data: Mapping[str, Any], key: str) -> str:
    return str(data.get(key, ""))


@dataclass(frozen=True, slots=True)
class ScaleUpPayload:
    """A resize of one node group: its target size, the node shape, the jobs it is for."""

    target: int = 0
    group: str = ""
    gpus: int = 0
    gpu_model: str = ""
    jobs: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "group": self.group,
            "gpus": self.gpus,
            "gpu_model": self.gpu_model,
            "jobs": list(self.jobs),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ScaleUpPayload:
        return cls(
            target=_int(data, "target"),
            group=_str(data, "group"),
            gpus=_int(data, "gpus"),
            gpu_model=_str(data, "gpu_model"),
            jobs=tuple(str(j) for j in data.get("jobs", ()) or ()),
        )


@dataclass(frozen=True, slots=True)
class TerminatePayload:
    """Enough to terminate the instance again after a restart, without the cloud's listing."""

    reason: str = ""
    cloud: str = ""
    region: str = ""
    zone: str = ""
    instance_type: str = ""
    group: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "cloud": self.cloud,
            "region": self.region,
            "zone": self.zone,
            "instance_type": self.instance_type,
            "group": self.group,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TerminatePayload:
        return cls(
            reason=_str(data, "reason"),
            cloud=_str(data, "cloud"),
            region=_str(data, "region"),
            zone=_str(data, "zone"),
            instance_type=_str(data, "instance_type"),
            group=_str(data, "group"),
        )


IntentPayload = ScaleUpPayload | TerminatePayload


def late_result(
    result: Mapping[str, Any], now_ts: float, missing: int, code: str
) -> dict[str, Any]:
    """A confirmed scale-up's result once the cloud failed `missing` of its nodes after the
    confirmation: fewer added, the shortfall's code, and when it was learned."""
    out = dict(result)
    out["added"] = max(0, int(out.get("added", 0) or 0) - max(0, missing))
    out["shortfall_code"] = code[:64]
    out["late_failure_ts"] = now_ts
    return out
