"""The jobs table's record: every job the controller has seen, as Slurm last showed it.

The store keeps one `JobRecord` per job id (`ports.store.JobHistory`): submit, eligible,
start and end times, the time limit, GPUs (and GRES type), partition, account, user, its team,
its state and where it last ran (nodes, and the cloud instances among them). The loop writes
what changed each pass; a job Slurm stops listing without a final state is closed as `gone`.
The console's Jobs page and the planner's replay of the site's own past read it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from provisioner.domain.instances import CloudInstance
from provisioner.domain.jobs import Job, JobState

# A job Slurm stopped listing before the controller saw how it ended (squeue drops a finished
# job after MinJobAge): it ended, how is unknown.
GONE = "gone"
OPEN_STATES = frozenset({JobState.PENDING.value, JobState.RUNNING.value})
JOB_STATES = (*(s.value for s in JobState), GONE)


def where_job_ran(nodes: Collection[str], instance_ids: Collection[str]) -> str:
    """Where a job ran: "cloud" (on any instance, even one since ended), "onprem", or "" (it
    has not run)."""
    if instance_ids:
        return "cloud"
    return "onprem" if nodes else ""


@dataclass(frozen=True, slots=True)
class JobRecord:
    job_id: str
    submit_ts: float
    state: str
    gpus: int
    gpu_type: str = ""
    partition: str = ""
    account: str = ""
    user: str = ""
    team: str = ""
    eligible_ts: float | None = None
    start_ts: float | None = None
    end_ts: float | None = None
    time_limit_s: float | None = None
    nodes: tuple[str, ...] = ()  # where it ran last (none while pending)
    instance_ids: tuple[str, ...] = ()  # the cloud instances among those nodes
    first_seen_ts: float = 0.0
    last_seen_ts: float = 0.0
    # The controller's runtime prediction while the job waited (plan/history.py), and where it
    # came from ("user", "group", "partition"); kept once the job starts, to set beside the truth.
    predicted_runtime_s: float | None = None
    prediction_source: str = ""

    @property
    def open(self) -> bool:
        return self.state in OPEN_STATES

    @property
    def in_cloud(self) -> bool:
        return bool(self.instance_ids)

    @property
    def placement(self) -> str:
        return where_job_ran(self.nodes, self.instance_ids)

    @property
    def waited_s(self) -> float | None:
        """From submit (or eligibility, when later) to start; None while it has not started."""
        if self.start_ts is None:
            return None
        ready = max(self.submit_ts, self.eligible_ts or self.submit_ts)
        return max(0.0, self.start_ts - ready)

    @property
    def ran_s(self) -> float | None:
        if self.start_ts is None or self.end_ts is None:
            return None
        return max(0.0, self.end_ts - self.start_ts)

    def content(self) -> tuple[object, ...]:
        """What a pass may change: two records with equal content need no write."""
        return (
            self.state, self.submit_ts, self.eligible_ts, self.start_ts, self.end_ts,
            self.time_limit_s, self.gpus, self.gpu_type, self.partition, self.account,
            self.user, self.team, self.nodes, self.instance_ids, self.predicted_runtime_s,
            self.prediction_source,
        )  # fmt: skip


def job_records(
    jobs: Iterable[Job],
    instance_of_node: Mapping[str, CloudInstance],
    team_for: Callable[[str], str],
    now_ts: float,
) -> list[JobRecord]:
    """One record per job of a snapshot, seen at `now_ts`. `instance_of_node`: the cloud
    instance behind each burst node's name now. A job that started before that instance was
    launched ran on an earlier machine of the same name (Slurm lists finished jobs for a
    while), so it is not this instance's. A pending job's learned runtime (the planner's
    annotation) is its prediction; other jobs carry none, and the store keeps the last one."""
    out: list[JobRecord] = []
    for j in jobs:
        nodes = tuple(j.nodes) if j.state is not JobState.PENDING else ()
        learned = j.state is JobState.PENDING and bool(j.runtime_source)
        out.append(
            JobRecord(
                job_id=j.job_id,
                submit_ts=j.submit_ts,
                state=j.state.value,
                gpus=j.gpus,
                gpu_type=j.gpu_type,
                partition=j.partition,
                account=j.account,
                user=j.user,
                team=team_for(j.account),
                eligible_ts=j.eligible_ts,
                start_ts=j.start_ts if j.state is not JobState.PENDING else None,
                end_ts=j.end_ts if j.state not in (JobState.PENDING, JobState.RUNNING) else None,
                time_limit_s=j.time_limit_s,
                nodes=nodes,
                instance_ids=_instances(j, nodes, instance_of_node),
                first_seen_ts=now_ts,
                last_seen_ts=now_ts,
                predicted_runtime_s=j.expected_runtime_s if learned else None,
                prediction_source=j.runtime_source if learned else "",
            )
        )
    return out


def _instances(
    job: Job, nodes: tuple[str, ...], instance_of_node: Mapping[str, CloudInstance]
) -> tuple[str, ...]:
    out = []
    for n in nodes:
        inst = instance_of_node.get(n)
        if inst is not None and (job.start_ts is None or job.start_ts >= inst.launched_ts):
            out.append(inst.instance_id)
    return tuple(out)


__all__ = ["GONE", "JOB_STATES", "OPEN_STATES", "JobRecord", "job_records"]
