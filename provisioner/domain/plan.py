"""Plans and decisions: structured records with reason codes. Text is only a rendering."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum

from provisioner.domain.offers import OfferKey


class ReasonCode(StrEnum):
    BURST_WAIT_EXCEEDS_BUDGET = "burst_wait_exceeds_budget"
    BURST_URGENT = "burst_urgent"
    WAIT_WITHIN_BUDGET = "wait_within_budget"
    WAIT_FASTER_THAN_BOOT = "wait_faster_than_boot"
    WAIT_NOT_ELIGIBLE = "wait_not_eligible"  # held, or a begin time still ahead
    WAIT_UNCERTAIN_RUNTIME = "wait_uncertain_runtime"
    COVERED_BY_INFLIGHT = "covered_by_inflight"
    BLOCKED_NO_OFFER = "blocked_no_offer"
    BLOCKED_POOL_MAX = "blocked_pool_max"
    BLOCKED_BACKOFF = "blocked_backoff"
    BLOCKED_GLOBAL_BUDGET = "blocked_global_budget"
    BLOCKED_TEAM_BUDGET = "blocked_team_budget"
    BLOCKED_STALE_SNAPSHOT = "blocked_stale_snapshot"
    BLOCKED_PAUSED = "blocked_paused"
    SCALE_DOWN_IDLE = "scale_down_idle"
    TERMINATE_DRAINED = "terminate_drained"
    KEEP_GPU_BUSY = "keep_gpu_busy"
    JOIN_TIMEOUT = "join_timeout"
    # a job Slurm held after a failed launch goes back to the queue in a burst partition only
    RELEASE_LAUNCH_FAILED = "release_launch_failed"
    # an alert: a bound node's NodeAddr in Slurm is not its instance's address; it is drained
    NODE_ADDRESS_MISMATCH = "node_address_mismatch"
    # the cloud gave up on launches of a confirmed scale-up: the group shrinks to what it holds
    LAUNCH_FAILED = "launch_failed"
    # the cloud warned it takes a spot VM away: jobs signalled, requeued, the instance ended
    SPOT_WARNING = "spot_warning"
    # an alert: the cloud denied a permission; the pool takes no new nodes until undrained
    POOL_PAUSED = "pool_paused"
    # a round of choosing the waiting policy from the site's own past: kept or switched, why
    POLICY_SELECTION = "policy_selection"
    # a job asking only for parts of GPUs (MIG devices, shards) waits for on-prem ones: within
    # its budget, or because no MIG pool offers them
    WAIT_GPU_SHARE = "wait_gpu_share"


class Rejection(StrEnum):
    """Why the planner passed over an offer it considered."""

    COSTLIER = "costlier"  # a cheaper offer passed every guardrail
    BACKOFF = "backoff"  # the offer is backed off after capacity errors
    POOL_MAX = "pool_max"  # the pool is at its max size
    PASS_MAX = "pass_max"  # the per-pass scale-up cap is reached
    GLOBAL_BUDGET = "blocked_global_budget"  # the global $/h cap
    TEAM_BUDGET = "blocked_team_budget"  # the team's monthly budget


@dataclass(frozen=True, slots=True)
class Alternative:
    """An offer the planner considered for a decision, with its price and verdict (None for
    the chosen offer and for one that is merely not needed)."""

    offer: OfferKey
    usd_per_hour: Decimal
    expected_cost_usd: Decimal
    chosen: bool = False
    rejected_because: Rejection | None = None


# Decision.detail key: the predicted wait is only known to exceed `predicted_wait_s` (the
# planner's search stopped at the job's budget), so it must read "beyond", not "about".
LOWER_BOUND = "predicted_wait_is_lower_bound"


@dataclass(frozen=True, slots=True)
class Decision:
    decision_id: str
    reason: ReasonCode
    job_ids: tuple[str, ...] = ()
    chosen: OfferKey | None = None
    alternatives: tuple[Alternative, ...] = ()
    predicted_wait_s: float | None = None
    wait_budget_s: float | None = None
    wait_saved_s: float | None = None
    global_headroom_usd_hr: Decimal | None = None
    team_headroom_usd: Decimal | None = None
    team: str = ""
    detail: Mapping[str, str] = field(default_factory=dict)
    # What the decision is about, besides its jobs: typed, so code never reads them out of
    # `detail` (which is for people). Empty when it does not apply.
    pool: str = ""
    node: str = ""
    instance: str = ""

    @property
    def about(self) -> dict[str, str]:
        """pool, node and instance, where set: with `detail`, what a rendering shows."""
        return {
            k: v
            for k, v in (("pool", self.pool), ("node", self.node), ("instance", self.instance))
            if v
        }

    @property
    def wait_is_lower_bound(self) -> bool:
        return self.detail.get(LOWER_BOUND) == "true"


def decision_id(now_ts: float, reason: ReasonCode, *parts: str) -> str:
    """Deterministic id: the same snapshot and policy always give the same ids."""
    # reason.value is what f"{reason}" gives a StrEnum, without the Enum's format call
    h = hashlib.sha1(f"{now_ts:.3f}|{reason.value}|{'|'.join(parts)}".encode()).hexdigest()
    return f"d-{h[:16]}"


@dataclass(frozen=True, slots=True)
class ScaleUp:
    pool: str
    offer: OfferKey
    nodes: int
    gpus_per_node: int
    usd_per_hour_per_node: Decimal
    job_ids: tuple[str, ...]
    decision: Decision
    # Offers to try, in order, when the chosen one has no capacity: costlier alternatives of
    # the same pool and node shape that still fit the budget headroom (the planner's choice).
    fallbacks: tuple[OfferKey, ...] = ()


@dataclass(frozen=True, slots=True)
class Drain:
    node: str
    instance_id: str
    pool: str
    decision: Decision


@dataclass(frozen=True, slots=True)
class Terminate:
    node: str
    instance_id: str
    pool: str
    decision: Decision


@dataclass(frozen=True, slots=True)
class MoveJobs:
    """Send pending jobs to a burst pool's partition: capacity already bought (idle, or still
    booting) covers them, so nothing new is bought."""

    pool: str
    job_ids: tuple[str, ...]
    decision: Decision


@dataclass(frozen=True, slots=True)
class ReleaseJobs:
    """Release jobs Slurm held after a failed launch back into a burst pool's partition (see
    `Job.launch_failed`); Slurm then powers a node up for them, planned like any burst."""

    pool: str
    job_ids: tuple[str, ...]
    decision: Decision


# Every change the controller makes to the world is one of these: the planner decides them, the
# reconcile loop carries them out, and nothing acts on a decision alone.
Action = ScaleUp | Drain | Terminate | MoveJobs | ReleaseJobs


@dataclass(frozen=True, slots=True)
class Plan:
    created_ts: float
    actions: tuple[Action, ...] = ()
    decisions: tuple[Decision, ...] = ()
    predicted_start_ts: Mapping[str, float] = field(default_factory=dict)

    @property
    def scale_ups(self) -> tuple[ScaleUp, ...]:
        return tuple(a for a in self.actions if isinstance(a, ScaleUp))

    @property
    def drains(self) -> tuple[Drain, ...]:
        return tuple(a for a in self.actions if isinstance(a, Drain))

    @property
    def terminations(self) -> tuple[Terminate, ...]:
        return tuple(a for a in self.actions if isinstance(a, Terminate))

    @property
    def moves(self) -> tuple[MoveJobs, ...]:
        return tuple(a for a in self.actions if isinstance(a, MoveJobs))

    @property
    def releases(self) -> tuple[ReleaseJobs, ...]:
        return tuple(a for a in self.actions if isinstance(a, ReleaseJobs))

    @property
    def planned_usd_per_hour(self) -> Decimal:
        return sum((a.usd_per_hour_per_node * a.nodes for a in self.scale_ups), Decimal(0))
