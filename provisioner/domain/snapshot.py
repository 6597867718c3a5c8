"""The immutable view of the world one reconcile pass plans from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal

from provisioner.domain.instances import CloudInstance
from provisioner.domain.jobs import Job, JobState
from provisioner.domain.nodes import Node, NodeKind


@dataclass(frozen=True, slots=True)
class SpendState:
    """Money already committed, so the planner can respect hard budgets.

    `burn_usd_hr` is the $/h of every cloud instance alive or requested (in flight included);
    `team_month_spent_usd` what each team spent this month so far (ledger); and
    `team_committed_usd` the expected cost still to come of capacity already requested for a team.
    """

    burn_usd_hr: Decimal = Decimal(0)
    team_month_spent_usd: Mapping[str, Decimal] = field(default_factory=dict)
    team_committed_usd: Mapping[str, Decimal] = field(default_factory=dict)
    # Why `burn_usd_hr` may fall short ("" when it is whole): a cloud listed in part or not at
    # all may run machines the store does not know (a store restored from an older copy).
    unknown: str = ""


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    taken_ts: float
    jobs: tuple[Job, ...] = ()
    nodes: tuple[Node, ...] = ()
    instances: tuple[CloudInstance, ...] = ()
    spend: SpendState = field(default_factory=SpendState)
    stale: bool = False
    stale_reasons: tuple[str, ...] = ()
    paused: bool = False

    @property
    def pending(self) -> tuple[Job, ...]:
        return tuple(j for j in self.jobs if j.state is JobState.PENDING)

    @property
    def running(self) -> tuple[Job, ...]:
        return tuple(j for j in self.jobs if j.state is JobState.RUNNING)

    def nodes_of(self, kind: NodeKind) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.kind is kind)

    def mark_stale(self, reason: str) -> ClusterSnapshot:
        return replace(self, stale=True, stale_reasons=(*self.stale_reasons, reason))
