"""Job usage for cost attribution: which job used how many GPUs on which node, from when to when.

Two sources, one record (`domain.records.JobUsage`, the shape the store keeps; the
controller fills in the instance, pool and team before writing it):

* `sacct --json` where slurmdbd runs (`parse_sacct`, `SacctUsageSource`): Slurm's own record,
  exact start and end, the partition actually used, `gres/gpu` from the allocated TRES.
* otherwise `UsageTracker`: the controller's own observation of running jobs on each pass. It is
  deterministic and does no I/O; times come from the jobs (Slurm's start/end) and, only when a job
  vanished without an end time, from the pass that noticed (`now_ts`).

A job on N nodes yields N records, its GPUs split over them (Slurm allocates GPUs per node).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from provisioner.command_runner import CommandRunner, run_observed
from provisioner.domain.errors import SnapshotError
from provisioner.domain.gpu_share import part_of_gpus
from provisioner.domain.hostlist import HostlistError, expand_hostlist
from provisioner.domain.jobs import Job, JobState
from provisioner.domain.nodes import Node
from provisioner.domain.records import JobUsage
from provisioner.observe.slurm.parse import check_errors, load_json, number


def split_gpus(gpus: int, nodes: Sequence[str]) -> list[tuple[str, int]]:
    """GPUs per node: an even split, the remainder to the first nodes."""
    if not nodes:
        return []
    q, r = divmod(gpus, len(nodes))
    return [(n, q + (1 if i < r else 0)) for i, n in enumerate(nodes)]


def _used_partition(
    job_partition: str, node: str, node_partitions: Mapping[str, Sequence[str]]
) -> str:
    """A multi-partition job (`onprem,cloud`) ran in the partition its node belongs to."""
    wanted = [p for p in job_partition.split(",") if p]
    if len(wanted) <= 1:
        return job_partition
    for p in node_partitions.get(node, ()):
        if p in wanted:
            return p
    return job_partition


_FINISHED = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED})


class UsageTracker:
    """Turns successive observations of the job list into per-job, per-node usage records."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[JobUsage, ...]] = {}
        self._done: set[tuple[str, float]] = set()

    @property
    def open_records(self) -> tuple[JobUsage, ...]:
        return tuple(r for recs in self._open.values() for r in recs)

    def _records(
        self,
        job: Job,
        start: float,
        end: float | None,
        parts: Mapping[str, Sequence[str]],
        hw: Mapping[str, Node] | None = None,
    ) -> tuple[JobUsage, ...]:
        hw = hw or {}

        def on_whole_gpus(node: str) -> bool:
            """A job choosing among classes (`1g.10gb|t4`) on a node without MIG devices holds
            whole GPUs of it."""
            s, n = job.share, hw.get(node)
            return (
                s is not None and bool(s.also) and n is not None and not (n.shares and n.shares.mig)
            )

        def part(node: str) -> float:
            if job.share is None:
                return 0.0
            if on_whole_gpus(node):
                return job.share.count / max(1, len(job.nodes))
            n = hw.get(node)
            shares, whole = (n.shares, n.gpus) if n is not None else (None, 0)
            return part_of_gpus(job.share, len(job.nodes), shares, whole)

        def part_name(node: str) -> str:
            return "" if job.share is None or on_whole_gpus(node) else job.share.part

        return tuple(
            JobUsage(
                job_id=job.job_id,
                node_name=node,
                gpus=g,
                start_ts=start,
                end_ts=end,
                account=job.account,
                partition=_used_partition(job.partition, node, parts),
                user=job.user,
                part_gpus=part(node),
                gpu_part=part_name(node),
            )
            for node, g in split_gpus(job.gpus, job.nodes)
        )

    def update(
        self, jobs: Iterable[Job], now_ts: float, nodes: Iterable[Node] = ()
    ) -> tuple[JobUsage, ...]:
        """Feed one pass's jobs; returns the records that closed in this pass."""
        hw = {n.name: n for n in nodes}
        parts = {name: n.partitions for name, n in hw.items()}
        seen = {j.job_id: j for j in jobs}
        closed: list[JobUsage] = []
        # 1. open records whose job stopped running: close with Slurm's end time, else now
        for job_id, recs in list(self._open.items()):
            job = seen.get(job_id)
            if job is not None and job.state is JobState.RUNNING:
                continue
            end = job.end_ts if job is not None and job.end_ts is not None else now_ts
            start = recs[0].start_ts
            if job is not None and job.state in _FINISHED and job.start_ts is not None:
                start = job.start_ts  # Slurm's final word (reset after a node powered up)
            closed.extend(replace(r, start_ts=start, end_ts=max(end, start)) for r in recs)
            self._done.add((job_id, start))
            del self._open[job_id]
        # 2. running jobs: open (or refresh the start time Slurm resets after a node powers up).
        #    A job still configuring (its nodes booting) has not started: Slurm's start time
        #    for it is the allocation's, which Slurm moves once the nodes are up.
        for job in seen.values():
            if job.state is JobState.RUNNING and job.nodes and not job.configuring:
                start = job.start_ts if job.start_ts is not None else now_ts
                prev = self._open.get(job.job_id)
                if prev is None or prev[0].start_ts != start:
                    self._open[job.job_id] = self._records(job, start, None, parts, hw)
            # 3. a job that started and ended between two passes
            elif (
                job.state in _FINISHED
                and job.nodes
                and job.start_ts is not None
                and (job.job_id, job.start_ts) not in self._done
                and job.job_id not in self._open
            ):
                end = job.end_ts if job.end_ts is not None else now_ts
                closed.extend(self._records(job, job.start_ts, max(end, job.start_ts), parts, hw))
                self._done.add((job.job_id, job.start_ts))
        # forget finished jobs Slurm no longer lists (they cannot come back)
        self._done = {k for k in self._done if k[0] in seen}
        return tuple(closed)


# --------------------------------------------------------------------------- sacct


def _sacct_gpus(tres: Any) -> int:
    if not isinstance(tres, Mapping):
        return 0
    for key in ("allocated", "requested"):
        for item in tres.get(key) or []:
            if (
                isinstance(item, Mapping)
                and item.get("type") == "gres"
                and str(item.get("name") or "").split(":")[0] == "gpu"
            ):
                count = number(item.get("count"), where="sacct tres count")
                if count:
                    return int(count)
    return 0


def parse_sacct(doc: Mapping[str, Any], *, source: str = "sacct --json") -> tuple[JobUsage, ...]:
    """Usage records of a `sacct --json` document (22.05 dbv0.0.38 and 23.x shapes). Jobs that
    never started (no start time, `None assigned`) yield nothing; running jobs an open record."""
    check_errors(doc, source)
    jobs = doc.get("jobs")
    if not isinstance(jobs, list):
        raise SnapshotError(f"{source}: no 'jobs' list in the document")
    out: list[JobUsage] = []
    for i, rec in enumerate(jobs):
        if not isinstance(rec, Mapping):
            raise SnapshotError(f"{source}: jobs[{i}] is not an object")
        where = f"{source}: jobs[{i}]"
        times = rec.get("time") or {}
        start = number(times.get("start"), where=f"{where}: time.start")
        if not start:
            continue
        end = number(times.get("end"), where=f"{where}: time.end") or None
        try:
            nodes = expand_hostlist(str(rec.get("nodes") or ""))
        except HostlistError:
            nodes = ()  # "None assigned"
        if not nodes:
            continue
        job_id = str(int(number(rec.get("job_id"), where=f"{where}: job_id") or 0))
        assoc = rec.get("association") or {}
        account = str(rec.get("account") or assoc.get("account") or "")
        user = str(rec.get("user") or assoc.get("user") or "")
        for node, g in split_gpus(_sacct_gpus(rec.get("tres")), nodes):
            out.append(
                JobUsage(
                    job_id=job_id,
                    node_name=node,
                    gpus=g,
                    start_ts=start,
                    end_ts=max(end, start) if end is not None else None,
                    account=account,
                    partition=str(rec.get("partition") or ""),
                    user=user,
                )
            )
    return tuple(out)


class SacctUsageSource:
    """Runs `sacct --json` for jobs since a time. Raises SnapshotError when accounting is not
    available (no slurmdbd: sacct exits non-zero), so the caller falls back to `UsageTracker`."""

    def __init__(self, runner: CommandRunner, *, timeout_s: float = 30.0, sacct: str = "sacct"):
        self._runner = runner
        self._timeout_s = timeout_s
        self._sacct = sacct

    def usage_since(self, since_ts: float) -> tuple[JobUsage, ...]:
        # sacct reads local time; -a all users, -X allocations only (no steps)
        since = datetime.fromtimestamp(since_ts).strftime("%Y-%m-%dT%H:%M:%S")
        argv = [self._sacct, "--json", "-a", "-X", "-S", since]
        res = run_observed(self._runner, argv, timeout_s=self._timeout_s)
        if not res.ok:
            raise SnapshotError(res.describe())
        return parse_sacct(load_json(res.stdout, source="sacct --json"))
