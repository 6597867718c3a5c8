"""Spot warnings before the pass: the report's parsing, the inbox, unmunge's output, and the
loop that a warning wakes."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest

from provisioner.domain.errors import InvalidArgument
from provisioner.domain.spot_warnings import SpotWarning, WarningKind, parse_report
from provisioner.observe.munge_credentials import CredentialRejected, parse_unmunge
from provisioner.observe.spot_inbox import SpotInbox
from provisioner.reconcile.loop import ControllerLoop

T = datetime(2026, 12, 5, 12, 0, tzinfo=UTC).timestamp()


def test_a_report_reads_into_a_warning_with_the_clouds_own_time():
    w = parse_report(
        b'{"node": "n-1", "instance_id": "i-1", "kind": "interruption",'
        b' "action_time": "2026-12-05T12:02:00Z"}',
        noticed_ts=T,
        source="10.0.0.5",
    )
    assert (w.node, w.instance_id, w.kind, w.source) == (
        "n-1",
        "i-1",
        WarningKind.INTERRUPTION,
        "10.0.0.5",
    )
    assert w.action_ts == T + 120 and w.deadline_ts() == T + 120


def test_each_warning_ends_its_vm_within_the_documented_window_when_it_names_no_time():
    aws = SpotWarning("n", "i", WarningKind.INTERRUPTION, T)
    gce = SpotWarning("n", "i", WarningKind.PREEMPTION, T)
    hint = SpotWarning("n", "i", WarningKind.REBALANCE, T)
    assert (aws.deadline_ts(), gce.deadline_ts(), hint.deadline_ts()) == (T + 120, T + 30, None)


def test_the_notices_time_is_read_on_the_clouds_clock_and_kept_within_the_window():
    # EC2 says 12:02:00 on its clock, which runs 30 s ahead of the controller's
    w = SpotWarning("n", "i", WarningKind.INTERRUPTION, T, T + 120)
    assert w.deadline_ts(skew_s=30) == T + 90
    # a clock ten minutes ahead or behind never stretches or spends the documented window
    assert w.deadline_ts(skew_s=-600) == T + 120
    assert w.deadline_ts(skew_s=600) == T


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        (b"[]", "not a JSON object"),
        (b'{"node": "n", "instance_id": "i"}', "'kind'"),
        (b'{"node": "n", "instance_id": "i", "kind": "fire"}', "'kind' 'fire'"),
        (b'{"node": "a b", "instance_id": "i", "kind": "rebalance"}', "'node' holds whitespace"),
        (b'{"node": "n", "instance_id": 7, "kind": "rebalance"}', "'instance_id'"),
        (b'{"node": "n", "instance_id": "i", "kind": "interruption", "action_time": "12:02"}',
         "'action_time' '12:02'"),
        (b'{"node": "n", "instance_id": "i", "kind": "interruption",'
         b' "action_time": "2026-12-05T12:02:00"}', "no time zone"),
    ],
)  # fmt: skip
def test_a_bad_report_names_its_field(raw: bytes, named: str):
    with pytest.raises(InvalidArgument, match=named.replace("(", r"\(")):
        parse_report(raw, noticed_ts=T)


def test_the_inbox_holds_the_first_of_each_kind_and_wakes_on_every_post():
    inbox = SpotInbox()
    woke: list[int] = []
    inbox.on_post(lambda: woke.append(1))
    first = SpotWarning("n", "i-1", WarningKind.INTERRUPTION, T, T + 120)
    assert inbox.post(first) is True
    assert inbox.post(SpotWarning("n", "i-1", WarningKind.INTERRUPTION, T + 10, T + 130)) is False
    assert inbox.post(SpotWarning("n", "i-1", WarningKind.REBALANCE, T - 60)) is True
    assert len(woke) == 3
    held = inbox.held()["i-1"]
    assert [w.kind for w in held] == [WarningKind.REBALANCE, WarningKind.INTERRUPTION]
    assert held[1] == first  # the first report's times stand
    inbox.mark_signalled("i-1", T + 1)
    inbox.mark_signalled("i-1", T + 5)
    assert inbox.signalled() == {"i-1": T + 1}
    inbox.keep_only(["i-2"])
    assert inbox.held() == {} and inbox.signalled() == {}


def test_unmunge_output_reads_into_a_claim_and_a_short_one_is_refused():
    out = (
        b"STATUS:          0\nENCODE_HOST:     10.0.0.5\nENCODE_TIME:     1796495687\n"
        b"UID:             0\nGID:             0\nLENGTH:          2\n\n{}"
    )
    claim = parse_unmunge(out)
    assert (claim.uid, claim.gid, claim.encode_ts, claim.payload) == (0, 0, 1796495687.0, b"{}")
    with pytest.raises(CredentialRejected, match="no payload"):
        parse_unmunge(b"STATUS: 0\n")
    with pytest.raises(CredentialRejected, match="lacks"):
        parse_unmunge(b"STATUS: 0\n\n{}")


class _Ctx:
    def now(self) -> float:
        return time.time()


class _Reconciler:
    """Counts passes; `wake_at` as the last pass planned it."""

    def __init__(self, wake_in_s: float | None = None) -> None:
        self.ctx = _Ctx()
        self.passes = 0
        self.wake_in_s = wake_in_s
        self.wake_at: float | None = None

    def run_pass(self) -> None:
        self.passes += 1
        self.wake_at = time.time() + self.wake_in_s if self.wake_in_s is not None else None


def _until(pred, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():  # a real thread: poll with a deadline
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_posted_warning_starts_the_next_pass_long_before_the_tick():
    rec = _Reconciler()
    loop = ControllerLoop(rec, tick_s=3600)  # type: ignore[arg-type]
    inbox = SpotInbox()
    inbox.on_post(loop.wake)
    t = threading.Thread(target=loop.run, kwargs={"max_passes": 2})
    t.start()
    _until(lambda: rec.passes == 1)
    inbox.post(SpotWarning("n", "i-1", WarningKind.PREEMPTION, T))
    t.join(timeout=10)
    assert not t.is_alive() and rec.passes == 2


def test_a_step_planned_for_later_gets_its_pass_then_not_at_the_tick():
    rec = _Reconciler(wake_in_s=0.2)
    loop = ControllerLoop(rec, tick_s=3600)  # type: ignore[arg-type]
    t = threading.Thread(target=loop.run, kwargs={"max_passes": 2})
    t.start()
    t.join(timeout=10)
    assert not t.is_alive() and rec.passes == 2
    loop.request_stop()
