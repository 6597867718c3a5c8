"""The controller's clock: never backwards, durations on the monotonic clock, a wall-clock step
followed only by a bounded slew, and carried on across a restart on the same boot."""

from __future__ import annotations

import pytest

from provisioner.clock import ClockMark, SteadyClock
from provisioner.domain.errors import InvalidArgument

T0 = 1_767_225_600.0


class Host:
    """A host's two clocks, moved by hand: the wall clock (NTP may step it) and the monotonic."""

    def __init__(self) -> None:
        self.mono = 5_000.0
        self.offset = 0.0  # what NTP stepped the wall clock by

    def wall(self) -> float:
        return T0 + (self.mono - 5_000.0) + self.offset

    def tick(self, s: float) -> None:
        self.mono += s


def steady(host: Host, boot: str = "boot-a", slew: float = 5e-4) -> SteadyClock:
    return SteadyClock(wall=host.wall, monotonic=lambda: host.mono, boot_id=boot, max_slew=slew)


def test_a_step_back_holds_the_clock_and_durations_stay_monotonic():
    host = Host()
    clock = steady(host)
    host.tick(100)
    before = clock.now_ts()
    host.offset = -600  # NTP steps the wall clock back ten minutes
    stamps = []
    for _ in range(10):
        host.tick(60)
        stamps.append(clock.now_ts())
    assert stamps == sorted(stamps) and stamps[0] > before
    # each minute measured as a minute, less at most the 500 ppm slew towards the wall
    for a, b in zip([before, *stamps], stamps, strict=False):
        assert 60 * (1 - 5e-4) - 1e-9 <= b - a <= 60 + 1e-9


def test_a_step_forward_is_not_a_jump():
    host = Host()
    clock = steady(host)
    a = clock.now_ts()
    host.offset = 3600  # an hour forward
    host.tick(60)
    b = clock.now_ts()
    assert b - a == pytest.approx(60 * (1 + 5e-4))
    assert clock.wall_offset_s() == pytest.approx(3600 - 60 * 5e-4, abs=1e-6)


def test_the_slew_catches_up_with_the_wall_clock_in_time():
    host = Host()
    clock = steady(host, slew=0.01)
    host.offset = 60.0
    host.tick(6000)  # 1% of 6,000 s covers the 60 s step
    clock.now_ts()
    assert clock.wall_offset_s() == pytest.approx(0.0, abs=1e-6)


def test_a_restart_on_the_same_boot_carries_on_whatever_the_wall_clock_did():
    host = Host()
    first = steady(host)
    host.tick(600)
    mark = first.mark()
    host.offset = 3600  # stepped forward while the controller was down
    host.tick(30)
    second = steady(host)
    second.resume(mark, floor_ts=mark.ts)
    assert second.now_ts() == pytest.approx(mark.ts + 30)


def test_a_restart_on_another_boot_starts_at_the_wall_clock_but_never_below_the_floor():
    host = Host()
    mark = ClockMark("boot-a", 4_000.0, T0 + 900)
    other = steady(host, boot="boot-b")
    other.resume(mark, floor_ts=T0 + 900)  # the wall clock (T0) is behind the latest stamp
    assert other.now_ts() == T0 + 900
    host.tick(10)
    assert other.now_ts() == pytest.approx(T0 + 910, abs=0.01)
    ahead = steady(host, boot="boot-c")
    ahead.resume(None, floor_ts=T0)
    assert ahead.now_ts() == pytest.approx(host.wall())


def test_hold_at_least_and_bad_slew():
    host = Host()
    clock = steady(host)
    clock.hold_at_least(T0 + 50)
    assert clock.now_ts() >= T0 + 50
    with pytest.raises(InvalidArgument):
        SteadyClock(max_slew=1.0)
