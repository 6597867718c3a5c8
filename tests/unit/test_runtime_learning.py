"""The controller's runtime model on a snapshot: what pending jobs are told, and what is not."""

from __future__ import annotations

from provisioner.domain.jobs import Job, JobState
from provisioner.domain.records import JobUsage
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.reconcile.runtime_learning import RuntimeLearner


class _Port:
    def __init__(self) -> None:
        self.saved: dict[str, list[float]] = {}

    def runtime_history(self) -> dict[str, list[float]]:
        return dict(self.saved)

    def save_runtime_history(self, entries: dict[str, list[float]], now_ts: float) -> None:
        self.saved.update(entries)


def _learner() -> RuntimeLearner:
    lr = RuntimeLearner(_Port())
    for k, rt in enumerate((300.0, 500.0)):
        r = JobUsage(f"d{k}", "n1", 1, 0.0, rt, account="cv", partition="onprem", user="ann")
        lr.learn([r], rt)
    return lr


def test_pending_jobs_without_an_estimate_get_the_learned_one_capped_by_their_limit() -> None:
    snap = ClusterSnapshot(
        taken_ts=1000.0,
        jobs=(
            Job("p1", 1, 900.0, account="cv", user="ann"),
            Job("p2", 1, 900.0, account="cv", user="ann", time_limit_s=350.0),
            Job("p3", 1, 900.0, account="cv", user="bob"),  # bob: the group's
            Job("p4", 1, 900.0, account="cv", user="ann", expected_runtime_s=50.0),
            Job("r1", 1, 0.0, user="ann", state=JobState.RUNNING, start_ts=10.0),
            Job("p5", 1, 900.0, partition="other", account="x", user="zed", time_limit_s=60.0),
        ),
    )
    out = {j.job_id: j for j in _learner().annotate(snap).jobs}
    # ann: mean of 300 and 500 = 400, spread sqrt((100^2 + 100^2) / 1) = 141.42
    assert (out["p1"].expected_runtime_s, out["p1"].runtime_source) == (400.0, "user")
    assert round(out["p1"].runtime_spread_s or 0, 2) == 141.42
    assert (out["p2"].expected_runtime_s, out["p2"].runtime_source) == (350.0, "user")
    assert (out["p3"].expected_runtime_s, out["p3"].runtime_source) == (400.0, "group")
    assert out["p4"].expected_runtime_s == 50.0 and out["p4"].runtime_source == ""
    assert out["r1"].expected_runtime_s is None  # running jobs are left alone
    assert out["p5"].expected_runtime_s is None  # nothing learned: its limit, as before


def test_a_snapshot_with_nothing_to_predict_is_returned_as_is() -> None:
    snap = ClusterSnapshot(taken_ts=0.0, jobs=(Job("p", 1, 0.0, user="new"),))
    assert RuntimeLearner(_Port()).annotate(snap) is snap
