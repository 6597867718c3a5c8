"""Controller-driven joins: which powered-up burst nodes registered, which ran past the join
timeout. Pure: the controller passes the snapshot, when it powered each node up, and `now_ts`;
it then marks timed-out nodes failed (`SlurmControl.mark_failed`, jobs requeue) and terminates
their instances."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from provisioner.domain.nodes import NodeState
from provisioner.domain.snapshot import ClusterSnapshot

JOINED_STATES = frozenset(
    {NodeState.IDLE, NodeState.MIXED, NodeState.ALLOCATED, NodeState.DRAINING, NodeState.DRAINED}
)


@dataclass(frozen=True, slots=True)
class JoinReport:
    joined: tuple[str, ...]  # slurmd registered: the instance is READY
    waiting: tuple[str, ...]  # still booting, within the timeout
    timed_out: tuple[str, ...]  # past the join timeout, or Slurm gave up (DOWN)


def check_joins(
    snapshot: ClusterSnapshot,
    powered_up_ts: Mapping[str, float],
    now_ts: float,
    join_timeout_s: float,
) -> JoinReport:
    """Classify each node the controller powered up. A node missing from the snapshot counts as
    waiting until the timeout (Slurm may hide it briefly); a stale snapshot times nothing out."""
    states = {n.name: n.state for n in snapshot.nodes}
    joined: list[str] = []
    waiting: list[str] = []
    timed_out: list[str] = []
    for name, since in sorted(powered_up_ts.items()):
        state = states.get(name)
        if state in JOINED_STATES:
            joined.append(name)
        elif snapshot.stale:
            waiting.append(name)
        elif state is NodeState.DOWN or now_ts - since > join_timeout_s:
            timed_out.append(name)
        else:
            waiting.append(name)
    return JoinReport(tuple(joined), tuple(waiting), tuple(timed_out))
