"""A cloud's warning that it will take a spot VM away, as the VM's watcher reports it.

AWS gives two, in instance metadata
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html,
.../rebalance-recommendations.html): the *interruption notice* (`spot/instance-action`, two
minutes before the instance is stopped or terminated) and the earlier, softer *rebalance
recommendation* (`events/recommendations/rebalance`: the instance is at elevated risk). GCE
gives one (https://cloud.google.com/compute/docs/instances/create-use-preemptible#detecting):
`instance/preempted` turns TRUE when the preemption starts, about 30 seconds before the VM is
stopped.

An interruption or a preemption means the node's jobs go back to the queue inside the window
(after a signal they can checkpoint on) and the instance ends. A rebalance recommendation only
stops new work from landing on the node: it drains, and goes when its jobs are done.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from provisioner.domain.errors import InvalidArgument

# How long each cloud's warning runs before the VM goes (the documented windows above).
AWS_NOTICE_S = 120.0
GCE_PREEMPTION_S = 30.0
_MAX_FIELD = 128


class WarningKind(StrEnum):
    INTERRUPTION = "interruption"  # AWS spot/instance-action
    REBALANCE = "rebalance"  # AWS events/recommendations/rebalance
    PREEMPTION = "preemption"  # GCE instance/preempted

    @property
    def ends_instance(self) -> bool:
        return self is not WarningKind.REBALANCE


@dataclass(frozen=True, slots=True)
class SpotWarning:
    """One warning about one instance. `action_ts`: when the cloud says it acts (the notice's
    `time`), else None (a rebalance recommendation names none; GCE gives none either).
    `source`: the address the report came from (the instance's private address when it is
    the VM itself that reports)."""

    node: str
    instance_id: str
    kind: WarningKind
    noticed_ts: float  # when the controller took the report
    action_ts: float | None = None
    source: str = ""

    @property
    def key(self) -> tuple[str, WarningKind]:
        return (self.instance_id, self.kind)

    def deadline_ts(self, skew_s: float = 0.0) -> float | None:
        """When the VM goes, on the controller's clock: the notice's own time (on the cloud's
        clock: `skew_s` is that clock minus the controller's), kept within the documented
        window from the report, else the whole window (none for a recommendation)."""
        if not self.kind.ends_instance:
            return None
        window = GCE_PREEMPTION_S if self.kind is WarningKind.PREEMPTION else AWS_NOTICE_S
        latest = self.noticed_ts + window
        if self.action_ts is None:
            return latest
        return min(max(self.action_ts - skew_s, self.noticed_ts), latest)


def _text(doc: dict[str, object], name: str, where: str) -> str:
    value = doc.get(name)
    if not isinstance(value, str) or not value.strip() or len(value) > _MAX_FIELD:
        raise InvalidArgument(f"{where}: field {name!r} must be a non-empty string")
    if any(c.isspace() for c in value):
        raise InvalidArgument(f"{where}: field {name!r} holds whitespace")
    return value


def _when(value: object, where: str) -> float | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise InvalidArgument(f"{where}: field 'action_time' must be an ISO 8601 time")
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(f"{where}: field 'action_time' {value!r} is not a time") from None
    if when.tzinfo is None:
        raise InvalidArgument(f"{where}: field 'action_time' {value!r} has no time zone")
    return when.timestamp()


def parse_report(payload: bytes, *, noticed_ts: float, source: str = "") -> SpotWarning:
    """The warning in a watcher's report: JSON with `node`, `instance_id`, `kind` and, for
    an interruption, the notice's `action_time`. Bad input raises `InvalidArgument` naming
    the field."""
    where = "spot warning report"
    try:
        doc = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        raise InvalidArgument(f"{where}: not JSON") from None
    if not isinstance(doc, dict):
        raise InvalidArgument(f"{where}: not a JSON object")
    kind_text = _text(doc, "kind", where)
    try:
        kind = WarningKind(kind_text)
    except ValueError:
        known = ", ".join(k.value for k in WarningKind)
        raise InvalidArgument(
            f"{where}: field 'kind' {kind_text!r} is not one of {known}"
        ) from None
    return SpotWarning(
        node=_text(doc, "node", where),
        instance_id=_text(doc, "instance_id", where),
        kind=kind,
        noticed_ts=noticed_ts,
        action_ts=_when(doc.get("action_time"), where),
        source=source,
    )


__all__ = [
    "AWS_NOTICE_S",
    "GCE_PREEMPTION_S",
    "SpotWarning",
    "WarningKind",
    "parse_report",
]
