"""Jobs as the scheduler reports them. Times are POSIX seconds (UTC by definition)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from provisioner.domain.errors import InvalidArgument
from provisioner.domain.gpu_share import ShareRequest


class JobState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Job:
    """One scheduler job.

    `gpus` is the job's total GPU count. `gpu_type` is the requested model ("" takes the
    on-prem default). `expected_runtime_s` is the best runtime estimate known (a user estimate,
    history, or the exact runtime in a simulator run with `--estimate exact`); None means unknown,
    and the time limit is used in its place when there is one. `runtime_source` says where a
    learned estimate came from ("user", "group", "partition": see plan/history.py; "" for one
    given as is) and `runtime_spread_s` how much that history varies (None: unknown).
    """

    job_id: str
    gpus: int
    submit_ts: float
    partition: str = "onprem"
    account: str = ""
    user: str = ""
    qos: str = ""
    gpu_type: str = ""
    time_limit_s: float | None = None
    expected_runtime_s: float | None = None
    runtime_source: str = ""
    runtime_spread_s: float | None = None
    state: JobState = JobState.PENDING
    start_ts: float | None = None
    end_ts: float | None = None
    nodes: tuple[str, ...] = ()
    eligible_ts: float | None = None
    held: bool = False
    # Held by Slurm after a failed launch ("launch failed requeued held"). On 22.05 a job
    # requeued from a CLOUD node that never got an address keeps the alias "TBD" and fails to
    # launch on any other node (measured: docs/controller.md), so only a cloud node can run it.
    launch_failed: bool = False
    # Allocated nodes that are still booting (Slurm's CONFIGURING): the job holds them but has
    # not started, and Slurm moves its start time to when they are up. No GPU time is its yet.
    configuring: bool = False
    # Parts of GPUs asked for (MIG devices of one profile, or shards), beside `gpus` whole
    # GPUs; None for a whole-GPU job. Not planned as whole GPUs.
    share: ShareRequest | None = None

    def __post_init__(self) -> None:
        if self.gpus < 0:
            raise InvalidArgument(f"job {self.job_id}: gpus must be >= 0, got {self.gpus}")

    def can_start(self, now_ts: float) -> bool:
        """A pending job Slurm would start now if resources were free."""
        if self.state is not JobState.PENDING or self.held:
            return False
        return self.eligible_ts is None or self.eligible_ts <= now_ts

    @property
    def runtime_estimate_s(self) -> float | None:
        if self.expected_runtime_s is not None:
            return self.expected_runtime_s
        return self.time_limit_s

    @property
    def partitions(self) -> tuple[str, ...]:
        """A multi-partition submit (`-p onprem,cloud`) lists every partition."""
        return tuple(p for p in self.partition.split(",") if p)
