"""Usage records for cost attribution: from successive observations, and from sacct --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provisioner.command_runner import CommandResult
from provisioner.domain.errors import SnapshotError
from provisioner.domain.jobs import Job, JobState
from provisioner.domain.nodes import Node, NodeKind
from provisioner.domain.records import JobUsage
from provisioner.observe.slurm.usage import (
    SacctUsageSource,
    UsageTracker,
    parse_sacct,
    split_gpus,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
NODES = [
    Node("onprem-1", NodeKind.ONPREM, 4, partitions=("onprem",)),
    Node("cloud-aws-1", NodeKind.BURST, 8, partitions=("cloud",)),
    Node("cloud-aws-2", NodeKind.BURST, 8, partitions=("cloud",)),
]


def j(jid: str, state: JobState, *, start=None, end=None, nodes=(), gpus=4, part="onprem,cloud"):
    return Job(
        job_id=jid, gpus=gpus, submit_ts=0.0, partition=part, account="gputeam", user="alice",
        state=state, start_ts=start, end_ts=end, nodes=tuple(nodes),
    )  # fmt: skip


def test_split_gpus() -> None:
    assert split_gpus(10, ["a", "b", "c"]) == [("a", 4), ("b", 3), ("c", 3)]
    assert split_gpus(4, []) == []


def test_tracker_opens_and_closes_with_slurm_times() -> None:
    t = UsageTracker()
    assert t.update([j("1", JobState.PENDING)], 100.0, NODES) == ()
    assert (
        t.update([j("1", JobState.RUNNING, start=110.0, nodes=["cloud-aws-1"])], 120.0, NODES) == ()
    )
    (rec,) = t.open_records
    assert (rec.node_name, rec.gpus, rec.partition, rec.end_ts) == ("cloud-aws-1", 4, "cloud", None)
    done = j("1", JobState.COMPLETED, start=110.0, end=150.0, nodes=["cloud-aws-1"])
    (closed,) = t.update([done], 160.0, NODES)
    assert closed == JobUsage(
        job_id="1",
        node_name="cloud-aws-1",
        gpus=4,
        start_ts=110.0,
        end_ts=150.0,
        account="gputeam",
        partition="cloud",
        user="alice",
    )
    assert closed.gpu_seconds() == 160.0
    assert t.update([done], 170.0, NODES) == ()  # still listed by squeue: not counted twice
    assert t.open_records == ()


def test_tracker_start_reset_after_power_up_and_short_jobs() -> None:
    t = UsageTracker()
    # CONFIGURING on a booting node, then Slurm resets the start time when the node is up
    t.update([j("2", JobState.RUNNING, start=100.0, nodes=["cloud-aws-1"])], 101.0, NODES)
    t.update([j("2", JobState.RUNNING, start=130.0, nodes=["cloud-aws-1"])], 131.0, NODES)
    (rec,) = t.open_records
    assert rec.start_ts == 130.0
    # a job that started and ended between two passes, multi-node, 16 GPUs
    short = j("3", JobState.COMPLETED, start=132.0, end=140.0, nodes=["cloud-aws-1", "cloud-aws-2"],
              gpus=16)  # fmt: skip
    closed = t.update([short, j("2", JobState.FAILED, start=131.0, end=145.0,
                                nodes=["cloud-aws-1"])], 150.0, NODES)  # fmt: skip
    got = sorted((r.job_id, r.node_name, r.gpus, r.start_ts, r.end_ts) for r in closed)
    assert got == [
        ("2", "cloud-aws-1", 4, 131.0, 145.0),
        ("3", "cloud-aws-1", 8, 132.0, 140.0),
        ("3", "cloud-aws-2", 8, 132.0, 140.0),
    ]


def test_a_configuring_job_has_no_gpu_time_until_its_node_is_up() -> None:
    """Slurm lists a job on a booting node as CONFIGURING with the allocation's start time,
    then moves the start to when the node is up (measured on 22.05: 11 s later on a burst
    node). Only that second start is the job's; the time before is the node's."""
    from dataclasses import replace

    t = UsageTracker()
    booting = replace(j("5", JobState.RUNNING, start=100.0, nodes=["cloud-aws-1"]),
                      configuring=True)  # fmt: skip
    assert t.update([booting], 101.0, NODES) == () and t.open_records == ()
    assert t.update([booting], 105.0, NODES) == () and t.open_records == ()
    t.update([j("5", JobState.RUNNING, start=111.0, nodes=["cloud-aws-1"])], 112.0, NODES)
    (rec,) = t.open_records
    assert rec.start_ts == 111.0
    done = j("5", JobState.COMPLETED, start=111.0, end=119.0, nodes=["cloud-aws-1"])
    (closed,) = t.update([done], 120.0, NODES)
    assert (closed.start_ts, closed.end_ts) == (111.0, 119.0)


def test_tracker_requeue_and_vanished_job() -> None:
    t = UsageTracker()
    t.update([j("4", JobState.RUNNING, start=10.0, nodes=["onprem-1"])], 20.0, NODES)
    (first,) = t.update([j("4", JobState.PENDING)], 30.0, NODES)  # requeued: time so far counts
    assert (first.start_ts, first.end_ts, first.partition) == (10.0, 30.0, "onprem")
    t.update([j("4", JobState.RUNNING, start=40.0, nodes=["cloud-aws-2"])], 41.0, NODES)
    (second,) = t.update([], 90.0, NODES)  # gone without an end time: closed at the pass
    assert (second.node_name, second.start_ts, second.end_ts) == ("cloud-aws-2", 40.0, 90.0)


def test_sacct_sample() -> None:
    recs = parse_sacct(json.loads((FIX / "sacct.json").read_text()))
    by_job = {r.job_id: r for r in recs}
    assert "21" not in by_job and "23" not in by_job  # never ran ("None assigned")
    r27 = by_job["27"]
    assert (r27.node_name, r27.gpus, r27.account, r27.partition) == (
        "cloud-aws-1", 8, "gputeam", "cloud",
    )  # fmt: skip
    assert (r27.start_ts, r27.end_ts) == (1796021785.0, 1796021788.0)
    assert by_job["26"].gpus == 4 and by_job["26"].account == "research"
    assert by_job["14"].gpus == 0  # before AccountingStorageTRES=gres/gpu was set


def test_sacct_source_without_slurmdbd_raises() -> None:
    class R:
        def run(self, argv, *, timeout_s):
            return CommandResult(tuple(argv), 1, "", "Slurm accounting storage is disabled")

    with pytest.raises(SnapshotError, match="accounting storage is disabled"):
        SacctUsageSource(R()).usage_since(0.0)
    with pytest.raises(SnapshotError, match="no 'jobs' list"):
        parse_sacct({"meta": {}})
