"""A cloud's stamps (launch, termination) turned into times the controller bills by: translated
by the cloud's measured skew, clamped into what the controller saw, far-off ones warned about."""

from __future__ import annotations

from collections.abc import Mapping

from provisioner.act.ports import OwnedInstance
from provisioner.domain.cloud_clock import WARN_SKEW_S, Evidence, evidence_ts

# The skew is measured to about a second (whole-second Date headers): a launch stamp less than
# this before a request is taken as launched for that request, not before it.
REPLACED_MARGIN_S = 5.0


class CloudStamps:
    """Cloud stamps turned into evidence, with a warning for each far outside. Where the
    measured skew is a span rather than a point (whole-second Date headers), every stamp is
    translated to the latest time the span allows: billing never starts before the cloud's
    start, whatever the measurement's error, and an end is never cut short (it is capped by
    when the controller saw it anyway). Durations are unchanged: both ends move alike."""

    def __init__(
        self,
        skew_s: Mapping[str, float],
        span_s: Mapping[str, tuple[float, float]] | None = None,
    ) -> None:
        self.skew_s = skew_s
        self.span_s = span_s or {}
        self.warnings: list[str] = []

    def _skew(self, cloud: str) -> float:
        span = self.span_s.get(cloud)
        return span[0] if span is not None else self.skew_s.get(cloud, 0.0)

    def floor_for(self, o: OwnedInstance, requested: float, unknown_floor: float) -> float:
        """The earliest `o` may be billed from, asked for at `requested` as far as the store
        knows. A launch stamp well before that, on a cloud whose clock is measured, is a
        machine asked for earlier than the store remembers: its group's own replacement of an
        interrupted member, or one whose request went with a store restored from an older
        copy. Its stamp is billed, no earlier than `unknown_floor` (a day back). On a cloud
        not measured yet, such a stamp may be the cloud's clock: clamped to the request."""
        if o.launched_ts is None or o.cloud not in self.skew_s:
            return requested
        launched = o.launched_ts - self._skew(o.cloud)
        return unknown_floor if launched < requested - REPLACED_MARGIN_S else requested

    def __call__(
        self, o: OwnedInstance, cloud_ts: float | None, lo: float, hi: float, what: str
    ) -> Evidence:
        skew = self.skew_s.get(o.cloud, 0.0)
        ev = evidence_ts(cloud_ts, self._skew(o.cloud), lo, hi)
        if abs(ev.off_s) > WARN_SKEW_S:
            when = "in the future" if ev.off_s > 0 else "before it was requested"
            self.warnings.append(
                f"{o.cloud} instance {o.instance_id}: its {what} stamp lies {abs(ev.off_s):.0f} s "
                f"{when} (measured skew {skew:+.1f} s): billed from what the controller saw"
            )
        if o.stamp_error:
            self.warnings.append(f"{o.stamp_error}: billed from what the controller saw")
        return ev
