"""The jobs table's records from a snapshot's jobs (issue 31): where a job ran, and which
cloud instances those nodes are; hand-written expectations."""

from __future__ import annotations

from decimal import Decimal

from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.job_records import job_records
from provisioner.domain.jobs import Job, JobState
from provisioner.domain.offers import OfferKey

T0 = 1_768_046_400.0


def inst(iid: str, node: str, launched: float) -> CloudInstance:
    offer = OfferKey.parse("aws/us-east-1/p4d.24xlarge/spot")
    return CloudInstance(iid, "aws-a100", offer, "A100", 8, Decimal("7.246"), InstanceState.READY,
                         launched, node_name=node)  # fmt: skip


def test_a_burst_job_names_its_instances_and_a_pending_one_runs_nowhere():
    jobs = [
        Job("1", 16, T0, partition="cloud", account="cv", state=JobState.RUNNING,
            start_ts=T0 + 900, nodes=("cloud-aws-1", "cloud-aws-2")),
        Job("2", 1, T0 + 5, account="", state=JobState.PENDING, nodes=("gpu-1",)),
        Job("3", 2, T0, state=JobState.COMPLETED, start_ts=T0 + 1, end_ts=T0 + 61,
            nodes=("gpu-1",), time_limit_s=600.0),
    ]  # fmt: skip
    nodes = {"cloud-aws-1": inst("i-01", "cloud-aws-1", T0 + 600),
             "cloud-aws-2": inst("i-02", "cloud-aws-2", T0 + 610)}  # fmt: skip
    a, b, c = job_records(
        jobs, nodes, lambda acct: {"cv": "vision"}.get(acct, acct or "none"), T0 + 930
    )
    assert (a.nodes, a.instance_ids, a.in_cloud, a.team) == (
        ("cloud-aws-1", "cloud-aws-2"),
        ("i-01", "i-02"),
        True,
        "vision",
    )
    assert a.end_ts is None and a.waited_s == 900.0
    assert (b.nodes, b.start_ts, b.team, b.state) == ((), None, "none", "pending")
    assert (c.instance_ids, c.ran_s, c.end_ts, c.time_limit_s) == ((), 60.0, T0 + 61, 600.0)
    assert a.first_seen_ts == a.last_seen_ts == T0 + 930


def test_a_job_that_ran_before_the_instance_launched_was_not_on_it():
    """Slurm lists a finished job for a while with its node's name; when a new instance takes
    that name, the old job ran on an earlier machine, not on it (the demo's instance page
    listed such jobs before)."""
    old = Job("7", 4, T0, state=JobState.COMPLETED, start_ts=T0 + 10, end_ts=T0 + 18,
              nodes=("cloud-aws-1",))  # fmt: skip
    new = Job("8", 4, T0 + 100, state=JobState.RUNNING, start_ts=T0 + 140, nodes=("cloud-aws-1",))
    a, b = job_records([old, new], {"cloud-aws-1": inst("i-9", "cloud-aws-1", T0 + 120)}, str, T0)
    assert a.instance_ids == () and b.instance_ids == ("i-9",)


def test_only_a_waiting_jobs_learned_runtime_is_its_prediction():
    learned = Job("1", 1, T0, expected_runtime_s=600.0, runtime_source="user")
    given = Job("2", 1, T0, expected_runtime_s=600.0)  # an estimate given as is
    running = Job("3", 1, T0, state=JobState.RUNNING, start_ts=T0, nodes=("gpu-1",),
                  expected_runtime_s=600.0, runtime_source="group")  # fmt: skip
    a, b, c = job_records([learned, given, running], {}, str, T0)
    assert (a.predicted_runtime_s, a.prediction_source) == (600.0, "user")
    assert (b.predicted_runtime_s, c.predicted_runtime_s) == (None, None)
