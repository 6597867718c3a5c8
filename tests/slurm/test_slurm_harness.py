"""The live-cluster harness's polling: a transient Slurm error while polling is retried until the
deadline; one that persists fails the test and names the last error. Only the observer is a
stand-in here (it fails as slurmctld did under load in CI)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from slurm_harness import Cluster

from provisioner.domain.errors import SnapshotError
from provisioner.domain.snapshot import ClusterSnapshot

TRANSIENT = "`squeue --json` exited 1: Failed while looking for jobs: Unspecified error"


class FlakyObserver:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def observe(self) -> ClusterSnapshot:
        self.calls += 1
        if self.calls <= self.failures:
            raise SnapshotError(f"{TRANSIENT} (#{self.calls})")
        return ClusterSnapshot(taken_ts=float(self.calls))


class NoRequests:
    """An empty power-request queue: `tick` hands nothing off."""

    def pending(self) -> list[Any]:
        return []


def harness(observer: FlakyObserver) -> Cluster:
    none = cast(Any, None)
    return Cluster(
        dir=Path("."),
        env={},
        runner=none,
        control=none,
        observer=cast(Any, observer),
        launcher=none,
        queue=cast(Any, NoRequests()),
        handler=none,
    )


def test_snapshot_retries_transient_errors_until_a_good_answer() -> None:
    obs = FlakyObserver(failures=2)
    snap = harness(obs).snapshot()
    assert obs.calls == 3 and snap.taken_ts == 3.0


def test_reset_observe_retries_transient_errors() -> None:
    obs = FlakyObserver(failures=2)
    assert harness(obs).observe(timeout=30).taken_ts == 3.0


def test_wait_keeps_polling_through_errors_until_the_predicate_holds() -> None:
    obs = FlakyObserver(failures=1)
    got = harness(obs).wait("ts 4", lambda s: s.taken_ts >= 4 and s, 30)
    assert got.taken_ts == 4.0


@pytest.mark.parametrize("poll", ["wait", "observe"])
def test_a_persistent_error_fails_with_the_last_error_at_the_deadline(poll: str) -> None:
    obs = FlakyObserver(failures=10**9)
    c = harness(obs)
    with pytest.raises(pytest.fail.Exception) as info:
        if poll == "wait":
            c.wait("a job", lambda s: s, 0.5)
        else:
            c.observe(timeout=0.5)
    msg = str(info.value)
    assert "timed out after 0.5 s" in msg
    assert f"last: Slurm error: {TRANSIENT} (#{obs.calls})" in msg
