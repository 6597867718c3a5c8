"""GPU time as NVML saw it, per UTC hour (domain/gpu_usage.py), on hand-worked intervals."""

from __future__ import annotations

from provisioner.domain.gpu_usage import GpuReadingAt, GpuUsage, usage_between

H = 3600.0
T = 1_790_000_000.0 - 1_790_000_000.0 % H  # an hour's start


def g(i: int, util: float | None, jobs: tuple[str, ...] = (), busy: bool | None = None,
      uuid: str = "") -> GpuReadingAt:  # fmt: skip
    return GpuReadingAt(i, uuid or f"GPU-{i}", util, bool(jobs) if busy is None else busy, jobs)


def test_an_interval_counts_the_closing_reading_split_at_the_hour():
    """[T+3540, T+3660): 60 s in the first hour, 60 s in the next, at the closing 50%."""
    rows = usage_between("n", T + 3540, [g(0, 10.0)], T + 3660, [g(0, 50.0, ("7",))])
    assert rows == [
        GpuUsage(T, "n", 0, "7", 60.0, 30.0, 60.0),
        GpuUsage(T + H, "n", 0, "7", 60.0, 30.0, 60.0),
    ]


def test_two_jobs_on_one_gpu_share_its_time_and_an_untagged_gpu_is_nobodys():
    rows = usage_between("n", T, [g(0, 0.0), g(1, 0.0)], T + 100,
                         [g(0, 80.0, ("7", "8")), g(1, 20.0)])  # fmt: skip
    assert rows == [
        GpuUsage(T, "n", 0, "7", 50.0, 40.0, 50.0),
        GpuUsage(T, "n", 0, "8", 50.0, 40.0, 50.0),
        GpuUsage(T, "n", 1, "", 100.0, 20.0, 0.0),
    ]


def test_a_process_without_a_job_tag_is_busy_and_no_reading_is_no_load():
    rows = usage_between("n", T, [g(0, 0.0)], T + 60, [g(0, None, busy=True)])
    assert rows == [GpuUsage(T, "n", 0, "", 60.0, 0.0, 60.0)]


def test_what_cannot_be_known_is_not_counted():
    """A gap longer than the limit, a GPU swapped in between (new UUID), a GPU missing at one
    end, and an older payload are neither used nor idle."""
    assert usage_between("n", T, [g(0, 50.0)], T + 301, [g(0, 50.0)], max_gap_s=300) == []
    assert usage_between("n", T, [g(0, 50.0)], T + 60, [g(0, 50.0, uuid="GPU-new")]) == []
    assert usage_between("n", T, [g(0, 50.0)], T + 60, [g(1, 50.0)]) == []
    assert usage_between("n", T + 60, [g(0, 50.0)], T, [g(0, 50.0)]) == []
