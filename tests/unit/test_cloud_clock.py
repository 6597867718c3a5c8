"""Measuring a cloud's skew from its answers, and its stamps as evidence (promise 5)."""

from __future__ import annotations

import random
from email.utils import formatdate

import pytest

from provisioner.domain.cloud_clock import (
    SkewTracker,
    agreed_span,
    date_sample,
    evidence_ts,
    launch_sample,
)

T0 = 1_767_225_600.0


def date_header(cloud_ts: float) -> str:
    return formatdate(cloud_ts, usegmt=True)  # whole seconds, as servers send it


def test_a_date_header_bounds_the_skew_to_its_second():
    s = date_sample(date_header(T0 + 600.7), sent_ts=T0 + 0.2, received_ts=T0 + 0.9)
    assert s is not None
    assert s.lo <= 600.7 - 0.5 <= s.hi  # the true skew, the server stamped mid-call
    assert s.lo == pytest.approx(600 - 0.9) and s.hi == pytest.approx(601 - 0.2)
    assert date_sample("", T0, T0) is None
    assert date_sample("not a date", T0, T0) is None


def test_many_answers_pin_a_skew_of_ten_minutes_to_well_under_a_second():
    rng = random.Random(7)
    skew = -600.0 + 0.37
    tracker = SkewTracker()
    for i in range(32):
        sent = T0 + i * 15 + rng.random()
        received = sent + rng.uniform(0.005, 0.2)
        served = rng.uniform(sent, received)
        tracker.add("aws", "default", date_sample(date_header(served + skew), sent, received))
    est = tracker.estimate("aws", "default")
    assert est is not None and est.samples == 32
    assert abs(est.skew_s - skew) < 0.25 and est.warning
    assert tracker.skew_by_cloud() == {"aws": est.skew_s}


def test_a_cloud_within_the_headers_resolution_is_not_corrected():
    tracker = SkewTracker()
    for i in range(5):
        t = T0 + 60 * i  # a manual clock on whole seconds, the cloud on the same
        tracker.add("gcp", "proj", date_sample(date_header(t), t, t))
    est = tracker.estimate("gcp", "proj")
    assert est is not None and est.skew_s == 0.0 and est.uncertainty_s == 0.5


def test_a_stray_launch_stamp_is_outvoted_and_a_changed_skew_takes_over():
    tracker = SkewTracker(keep=9)
    for i in range(4):
        t = T0 + i
        tracker.add("aws", "a", date_sample(date_header(t + 120), t, t))
    # a replacement the group launched on its own a minute before the request
    tracker.add("aws", "a", launch_sample(T0 + 120 - 60, T0 + 5, T0 + 6))
    est = tracker.estimate("aws", "a")
    assert est is not None and est.skew_s == 120.0
    for i in range(5):  # the cloud's clock is corrected: skew 0 from now on
        t = T0 + 100 + i
        tracker.add("aws", "a", date_sample(date_header(t), t, t))
    est = tracker.estimate("aws", "a")
    assert est is not None and est.skew_s == 0.0


def test_marzullo_picks_the_span_most_intervals_share():
    from provisioner.domain.cloud_clock import SkewSample

    samples = [SkewSample(lo, hi, "date", 0.0) for lo, hi in [(8, 12), (11, 13), (10, 12), (0, 1)]]
    assert agreed_span(samples) == (11, 12, 3)


def test_evidence_is_translated_then_clamped_into_what_the_controller_saw():
    ev = evidence_ts(T0 + 570, 600.0, T0 - 100, T0)
    assert (ev.ts, ev.off_s) == (T0 - 30, 0.0)
    early = evidence_ts(T0 - 3600, 0.0, T0 - 100, T0)
    assert early.ts == T0 - 100 and early.off_s == -3500 and early.clamped
    late = evidence_ts(T0 + 86_400 * 365 * 20, 0.0, T0 - 100, T0)  # decades ahead
    assert late.ts == T0 and late.clamped
    unread = evidence_ts(None, 0.0, T0 - 100, T0)
    assert (unread.ts, unread.clamped) == (T0, False)  # what the controller saw
