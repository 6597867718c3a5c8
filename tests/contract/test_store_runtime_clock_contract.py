"""The `RuntimeHistory` and `ClockMarks` contracts (`provisioner.ports.store`): the learned
runtimes round trip (a save replaces the names given, all or nothing, and leaves the others),
the clock mark of each boot and `latest_clock_ts`, and the clouds' skews round trip (by cloud,
then account, without their agreed span). On the in-memory classes (`MemoryRuntimeHistory`,
`MemoryClockMarks`), SQLite and PostgreSQL alike (see test_store_contract.py for how the
engines are chosen). Every expected value is written out by hand."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_store_contract import IMPLEMENTATIONS, T0, failing_after

from provisioner.clock import ClockMark
from provisioner.domain.cloud_clock import SkewEstimate
from provisioner.ports.store import ClockMarks, RuntimeHistory
from provisioner.store import Store
from provisioner.store.memory import MemoryClockMarks, MemoryRuntimeHistory


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def db_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(db_backend: str, request: pytest.FixtureRequest) -> Iterator[Store | None]:
    """The SQL store of this test (None: memory)."""
    if db_backend == "memory":
        yield None
        return
    s = Store(request.getfixturevalue("db_url"))
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def history(store: Store | None) -> RuntimeHistory:
    return store if store is not None else MemoryRuntimeHistory()


@pytest.fixture
def clocks(store: Store | None) -> ClockMarks:
    return store if store is not None else MemoryClockMarks()


# ----------------------------------------------------------------------------- RuntimeHistory


def test_runtime_history_round_trip(history: RuntimeHistory) -> None:
    assert history.runtime_history() == {}
    history.save_runtime_history({"user:ann": [60.0, 120.5], "group:cv": [30]}, T0)
    got = history.runtime_history()
    assert got == {"group:cv": [30.0], "user:ann": [60.0, 120.5]}
    assert all(isinstance(v, float) for values in got.values() for v in values)


def test_a_save_replaces_the_names_given_and_leaves_the_others(history: RuntimeHistory) -> None:
    history.save_runtime_history({"user:ann": [60.0, 120.5], "group:cv": [30.0]}, T0)
    history.save_runtime_history({"user:ann": [90.0], "partition:gpu": [3600.0]}, T0 + 60)
    assert history.runtime_history() == {
        "group:cv": [30.0],
        "partition:gpu": [3600.0],
        "user:ann": [90.0],
    }
    history.save_runtime_history({}, T0 + 120)  # nothing given: nothing changes
    history.save_runtime_history({"group:cv": []}, T0 + 180)  # a name may learn it knows none
    assert history.runtime_history() == {
        "group:cv": [],
        "partition:gpu": [3600.0],
        "user:ann": [90.0],
    }


def test_a_save_that_breaks_half_way_keeps_nothing(history: RuntimeHistory) -> None:
    history.save_runtime_history({"user:ann": [60.0]}, T0)
    # The SQL store writes names in sorted order: "group:cv" would be written before the
    # runtimes of "user:zed" break.
    broken = failing_after([1.0, 2.0], RuntimeError())
    with pytest.raises(RuntimeError):
        history.save_runtime_history(
            {"group:cv": [30.0], "user:ann": [1.0], "user:zed": broken},  # type: ignore[dict-item]
            T0 + 60,
        )
    assert history.runtime_history() == {"user:ann": [60.0]}


def test_changing_the_history_read_back_changes_nothing_stored(history: RuntimeHistory) -> None:
    history.save_runtime_history({"user:ann": [60.0]}, T0)
    got = history.runtime_history()
    got["user:ann"].append(1.0)
    got["user:bob"] = [2.0]
    assert history.runtime_history() == {"user:ann": [60.0]}


# ----------------------------------------------------------------------------- ClockMarks


def test_clock_marks_round_trip_per_boot(clocks: ClockMarks) -> None:
    assert clocks.clock_mark("boot-a") is None
    assert clocks.latest_clock_ts() == 0.0
    clocks.save_clock_mark(ClockMark("boot-a", 100.5, T0))
    clocks.save_clock_mark(ClockMark("boot-b", 7.25, T0 + 50))
    assert clocks.clock_mark("boot-a") == ClockMark("boot-a", 100.5, T0)
    assert clocks.clock_mark("boot-b") == ClockMark("boot-b", 7.25, T0 + 50)
    assert clocks.clock_mark("boot-c") is None
    assert clocks.latest_clock_ts() == T0 + 50


def test_a_boot_s_mark_is_replaced_and_the_latest_is_the_highest_of_all(
    clocks: ClockMarks,
) -> None:
    clocks.save_clock_mark(ClockMark("boot-a", 100.0, T0 + 10))
    clocks.save_clock_mark(ClockMark("boot-b", 5.0, T0 + 50))
    clocks.save_clock_mark(ClockMark("boot-a", 160.0, T0 + 70))
    assert clocks.clock_mark("boot-a") == ClockMark("boot-a", 160.0, T0 + 70)
    assert clocks.latest_clock_ts() == T0 + 70
    # The latest is the highest ts of any boot, not the one saved last.
    clocks.save_clock_mark(ClockMark("boot-c", 1.0, T0 + 20))
    assert clocks.latest_clock_ts() == T0 + 70
    # A boot's mark replaced by a lower one lowers the latest to the next highest.
    clocks.save_clock_mark(ClockMark("boot-a", 161.0, T0 + 30))
    assert clocks.latest_clock_ts() == T0 + 50


def test_cloud_skews_round_trip_by_cloud_then_account(clocks: ClockMarks) -> None:
    assert clocks.cloud_skews() == []
    clocks.save_cloud_skews(
        [
            SkewEstimate("gcp", "proj-1", -0.5, 0.05, 4, T0, lo_s=-0.55, hi_s=-0.45),
            SkewEstimate("aws", "222", 1.25, 0.1, 6, T0 + 1),
            SkewEstimate("aws", "111", 0.0, 0.25, 1, T0 + 2),
        ]
    )
    # The agreed span is not kept: it reads back as 0.0.
    assert clocks.cloud_skews() == [
        SkewEstimate("aws", "111", 0.0, 0.25, 1, T0 + 2),
        SkewEstimate("aws", "222", 1.25, 0.1, 6, T0 + 1),
        SkewEstimate("gcp", "proj-1", -0.5, 0.05, 4, T0),
    ]


def test_a_new_skew_estimate_replaces_the_account_s_last(clocks: ClockMarks) -> None:
    clocks.save_cloud_skews(
        [SkewEstimate("aws", "111", 1.0, 0.1, 3, T0), SkewEstimate("gcp", "p", 2.0, 0.2, 2, T0)]
    )
    clocks.save_cloud_skews([SkewEstimate("aws", "111", -3.5, 0.5, 8, T0 + 60)])
    clocks.save_cloud_skews([])  # nothing given: nothing changes
    assert clocks.cloud_skews() == [
        SkewEstimate("aws", "111", -3.5, 0.5, 8, T0 + 60),
        SkewEstimate("gcp", "p", 2.0, 0.2, 2, T0),
    ]
