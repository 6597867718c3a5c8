"""The `GpuUsageLog` contract (`provisioner.ports.store`): rows of one (hour, node, GPU, job)
add up, a window reads the hours starting in it, and pruning forgets whole hours. On the
in-memory class, SQLite and PostgreSQL alike. Every expected value is written out by hand."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_store_contract import IMPLEMENTATIONS, T0

from provisioner.domain.gpu_usage import GpuUsage
from provisioner.ports.store import GpuUsageLog
from provisioner.store import Store
from provisioner.store.memory import MemoryGpuUsageLog

H = 3600.0
H0 = T0 - T0 % H


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def db_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def log(db_backend: str, request: pytest.FixtureRequest) -> Iterator[GpuUsageLog]:
    if db_backend == "memory":
        yield MemoryGpuUsageLog()
        return
    s = Store(request.getfixturevalue("db_url"))
    try:
        yield s
    finally:
        s.close()


def test_rows_of_one_key_add_up_and_windows_read_whole_hours(log: GpuUsageLog) -> None:
    assert (
        log.add_gpu_usage(
            [
                GpuUsage(H0, "gpu-1", 0, "7", 60.0, 30.0, 60.0),
                GpuUsage(H0, "gpu-1", 0, "7", 60.0, 45.0, 60.0),  # same key: adds
                GpuUsage(H0, "gpu-1", 0, "", 120.0, 0.0, 0.0),
                GpuUsage(H0 + H, "gpu-1", 1, "8", 10.0, 10.0, 10.0),
            ]
        )
        == 3
    )
    assert log.add_gpu_usage([GpuUsage(H0, "gpu-1", 0, "7", 30.0, 3.0, 0.0)]) == 1
    assert log.gpu_usage(H0, H0 + H) == [
        GpuUsage(H0, "gpu-1", 0, "", 120.0, 0.0, 0.0),
        GpuUsage(H0, "gpu-1", 0, "7", 150.0, 78.0, 120.0),
    ]
    assert log.gpu_usage(H0 + H, H0 + 2 * H) == [
        GpuUsage(H0 + H, "gpu-1", 1, "8", 10.0, 10.0, 10.0)
    ]
    assert len(log.gpu_usage(H0, H0 + 2 * H)) == 3
    assert log.prune_gpu_usage(H0 + H) == 2
    assert [r.hour_ts for r in log.gpu_usage(0.0, H0 + 10 * H)] == [H0 + H]
