"""A cloud's clock is evidence, not truth (promise 5).

The controller measures each cloud account's skew (the cloud's clock minus its own) from what the
cloud answers, as intervals the skew must lie in:

* the HTTP `Date` header of a response, stamped by the server somewhere between the controller
  sending the request (`sent`) and reading the answer (`received`), to the whole second:
  skew in [date - received, date + 1 - sent];
* the launch stamp of an instance just requested: launched after the request (`sent`) and
  before the listing that shows it (`received`): skew in [launch - received, launch - sent].

The estimate comes from the span most samples agree on (Marzullo's algorithm, as NTP selects
among its sources), over the most recent samples: a stray sample (an instance the group launched
on its own before the request) is outvoted, and a changed skew takes over once the newer samples
outnumber the older. Of that span it takes the point nearest zero, the smallest correction the
evidence demands: a cloud whose `Date` headers (whole seconds) agree with the controller to
within their resolution is not corrected at all.

A cloud stamp is then translated into the controller's time (minus the skew) and clamped into
what the controller itself saw (`evidence_ts`): billing never starts before the request nor ends
after the controller saw the end, whatever the skew or a stand-in's clock says.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from provisioner.domain.errors import ProvisionerError

WARN_SKEW_S = 60.0  # above this, the skew is shown as a warning (metrics, doctor, the log)
_KEEP = 32  # Date samples per account the estimate is made from (several per pass)
_KEEP_LAUNCHES = 8  # launch samples, rarer (one per instance requested) and often tighter


class CloudTimestampError(ProvisionerError):
    """A cloud answered a timestamp that cannot be read. Names the instance and the field."""

    http_status = 502


@dataclass(frozen=True, slots=True)
class SkewSample:
    """The skew (cloud minus controller, seconds) lies in [lo, hi]."""

    lo: float
    hi: float
    source: str  # "date" | "launch"
    at_ts: float  # controller time of the observation


@dataclass(frozen=True, slots=True)
class SkewEstimate:
    cloud: str
    account: str
    skew_s: float
    uncertainty_s: float  # half the width of the agreed span
    samples: int  # how many recent samples agree with it
    measured_ts: float
    lo_s: float = 0.0  # the agreed span: the skew lies in [lo_s, hi_s]
    hi_s: float = 0.0

    @property
    def warning(self) -> bool:
        return abs(self.skew_s) > WARN_SKEW_S


def date_sample(date_header: str, sent_ts: float, received_ts: float) -> SkewSample | None:
    """The skew interval an HTTP `Date` header gives (RFC 9110: IMF-fixdate, whole seconds).
    None when the header is missing or unreadable (no evidence, no error: many proxies strip
    it)."""
    if not date_header:
        return None
    try:
        date = parsedate_to_datetime(date_header).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    if not math.isfinite(date) or received_ts < sent_ts:
        return None
    return SkewSample(date - received_ts, date + 1.0 - sent_ts, "date", received_ts)


def launch_sample(launched_ts: float, sent_ts: float, received_ts: float) -> SkewSample | None:
    """The skew interval the launch stamp of an instance requested at `sent_ts` and first listed
    at `received_ts` gives."""
    if not math.isfinite(launched_ts) or received_ts < sent_ts:
        return None
    return SkewSample(launched_ts - received_ts, launched_ts - sent_ts, "launch", received_ts)


def agreed_span(samples: list[SkewSample]) -> tuple[float, float, int]:
    """Marzullo's algorithm: the span covered by the most intervals, and how many cover it
    (ties: the lowest such span)."""
    edges: list[tuple[float, int]] = []
    for s in samples:
        edges.append((s.lo, -1))  # a start sorts before an end at the same point
        edges.append((s.hi, +1))
    edges.sort()
    best, count = 0, 0
    lo = hi = math.nan
    for i, (x, kind) in enumerate(edges):
        count -= kind
        if kind == -1 and count > best:
            best = count
            lo = x
            hi = edges[i + 1][0]
    return lo, hi, best


class SkewTracker:
    """The recent samples of each cloud account and their estimate. Adapters add samples from
    any thread; the loop reads the estimates once per pass."""

    def __init__(self, keep: int = _KEEP, keep_launches: int = _KEEP_LAUNCHES) -> None:
        self._keep = {"date": keep, "launch": keep_launches}
        # per account and source: a run of many Date samples must not push out the few launch
        # samples, which pin the skew where whole-second Date headers cannot
        self._samples: dict[tuple[str, str, str], deque[SkewSample]] = {}
        self._lock = threading.Lock()

    def add(self, cloud: str, account: str, sample: SkewSample | None) -> None:
        if sample is None:
            return
        with self._lock:
            key = (cloud, account, sample.source)
            q = self._samples.setdefault(key, deque(maxlen=self._keep.get(sample.source, 8)))
            q.append(sample)

    def estimate(self, cloud: str, account: str) -> SkewEstimate | None:
        with self._lock:
            samples = [
                s for (c, a, _), q in self._samples.items() if (c, a) == (cloud, account) for s in q
            ]
        if not samples:
            return None
        lo, hi, n = agreed_span(samples)
        skew = min(hi, max(lo, 0.0))  # the smallest correction within the agreed span
        at = max(s.at_ts for s in samples)
        return SkewEstimate(cloud, account, skew, (hi - lo) / 2, n, at, lo, hi)

    def estimates(self) -> list[SkewEstimate]:
        with self._lock:
            keys = sorted({(c, a) for c, a, _ in self._samples})
        return [e for k in keys if (e := self.estimate(*k)) is not None]

    def by_cloud(self) -> dict[str, SkewEstimate]:
        """Each cloud's estimate (an account per cloud per controller; with several, the one
        measured last)."""
        out: dict[str, SkewEstimate] = {}
        for e in self.estimates():
            if e.cloud not in out or e.measured_ts >= out[e.cloud].measured_ts:
                out[e.cloud] = e
        return out

    def skew_by_cloud(self) -> dict[str, float]:
        """The skew to translate each cloud's stamps by."""
        return {cloud: e.skew_s for cloud, e in self.by_cloud().items()}

    def span_by_cloud(self) -> dict[str, tuple[float, float]]:
        """The span each cloud's skew lies in (see `CloudStamps` in reconcile/cloud_stamps.py)."""
        return {cloud: (e.lo_s, e.hi_s) for cloud, e in self.by_cloud().items()}


@dataclass(frozen=True, slots=True)
class Evidence:
    """A cloud stamp in the controller's time: `ts`, clamped into what the controller saw;
    `off_s` how far the translated stamp lay outside that (0: inside)."""

    ts: float
    off_s: float

    @property
    def clamped(self) -> bool:
        return self.off_s != 0.0


def evidence_ts(cloud_ts: float | None, skew_s: float, lo: float, hi: float) -> Evidence:
    """`cloud_ts` translated by the skew, clamped into [lo, hi] (lo: when the controller asked
    for it; hi: when it saw it). With no readable stamp, what the controller saw (`hi`)."""
    hi = max(lo, hi)
    if cloud_ts is None or not math.isfinite(cloud_ts):
        return Evidence(hi, 0.0)
    t = cloud_ts - skew_s
    if t < lo:
        return Evidence(lo, t - lo)
    if t > hi:
        return Evidence(hi, t - hi)
    return Evidence(t, 0.0)
