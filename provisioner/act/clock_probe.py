"""The controller's side of measuring a cloud's clock: each cloud adapter reports its answers'
`Date` headers here (`ClockProbe`), and the loop the launch stamps of instances it just
requested; both feed the skew tracker (`provisioner.domain.cloud_clock`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

from provisioner.act.ports import ClockProbe, CloudPorts
from provisioner.domain.cloud_clock import SkewTracker, date_sample, launch_sample


class SkewProbe:
    """A `ClockProbe` for one cloud account."""

    def __init__(
        self, tracker: SkewTracker, cloud: str, account: str, now: Callable[[], float]
    ) -> None:
        self.tracker = tracker
        self.cloud = cloud
        self.account = account
        self._now = now

    def now(self) -> float:
        return self._now()

    def answered(self, date_header: str, sent_ts: float, received_ts: float) -> None:
        self.tracker.add(self.cloud, self.account, date_sample(date_header, sent_ts, received_ts))

    def launched(self, launched_ts: float | None, sent_ts: float, received_ts: float) -> None:
        """An instance requested at `sent_ts` and first listed at `received_ts`."""
        if launched_ts is not None:
            sample = launch_sample(launched_ts, sent_ts, received_ts)
            self.tracker.add(self.cloud, self.account, sample)


@runtime_checkable
class _Watched(Protocol):
    @property
    def account(self) -> str: ...

    def watch_clock(self, probe: ClockProbe) -> None: ...


def watch_clouds(
    clouds: Mapping[str, CloudPorts], tracker: SkewTracker, now: Callable[[], float]
) -> dict[str, SkewProbe]:
    """A probe per cloud whose adapter can report its answers (both shipped adapters can; a
    test double that cannot is simply not measured)."""
    probes: dict[str, SkewProbe] = {}
    for cloud, ports in sorted(clouds.items()):
        cap = ports.capacity
        if isinstance(cap, _Watched):
            probe = SkewProbe(tracker, cloud, cap.account, now)
            cap.watch_clock(probe)
            probes[cloud] = probe
    return probes
