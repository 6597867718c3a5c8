"""Orphan sweep: a pure comparison of what the cloud holds (by our tags) with the store's records.

* An instance with our controller tag and no record, listed for longer than the grace period, is
  an orphan: terminate it (a crash between the cloud call and the store write, or a hand-made
  instance). The grace counts from when this controller first saw it listed (`first_seen`), on
  its own clock: a cloud's launch stamp is on the cloud's clock, and may be off by minutes.
* An instance whose record is closed (terminated/failed), or whose record has outlived its state's
  timeout (its lease), is terminated after the grace period; never on lease expiry while Slurm
  shows its node running a job (`busy_nodes`): a job outlives any lease, it is never killed.
* A live record whose instance is gone from the cloud is closed, after the grace period, and only
  when the listing was complete (never from a partial listing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from provisioner.act.ports import CloudState, OwnedInstance
from provisioner.domain.instances import CloudInstance, InstanceState


class SweepReason(StrEnum):
    ORPHAN = "orphan"  # tagged as ours, no record
    RECORD_CLOSED = "record_closed"  # the record says terminated/failed, the VM still exists
    LEASE_EXPIRED = "lease_expired"  # the record outlived its state's timeout
    INSTANCE_GONE = "instance_gone"  # the record is live, the VM is gone


@dataclass(frozen=True, slots=True)
class SweepTerminate:
    instance: OwnedInstance
    reason: SweepReason


@dataclass(frozen=True, slots=True)
class SweepClose:
    instance_id: str
    reason: SweepReason


@dataclass(frozen=True, slots=True)
class SweepPlan:
    terminate: tuple[SweepTerminate, ...] = ()
    close: tuple[SweepClose, ...] = ()


_GOING = (CloudState.STOPPING, CloudState.TERMINATED)


def plan_sweep(
    owned: Sequence[OwnedInstance],
    records: Sequence[CloudInstance],
    *,
    controller: str,
    now_ts: float,
    grace_s: float,
    timeouts: Mapping[InstanceState, float] | None = None,
    listing_complete: bool = True,
    busy_nodes: frozenset[str] = frozenset(),
    first_seen: Mapping[str, float] | None = None,
) -> SweepPlan:
    seen = first_seen or {}
    by_id = {r.instance_id: r for r in records if r.instance_id}
    terminate: list[SweepTerminate] = []
    present: set[str] = set()
    for inst in sorted(owned, key=lambda i: i.instance_id):
        if inst.controller != controller:
            continue  # never touch what another controller owns
        if inst.state is CloudState.TERMINATED:
            continue
        present.add(inst.instance_id)
        if inst.state in _GOING:
            continue
        rec = by_id.get(inst.instance_id)
        if rec is None:
            if now_ts - seen.get(inst.instance_id, now_ts) >= grace_s:
                terminate.append(SweepTerminate(inst, SweepReason.ORPHAN))
        elif rec.state.terminal:
            if now_ts - rec.entered_state_ts >= grace_s:
                terminate.append(SweepTerminate(inst, SweepReason.RECORD_CLOSED))
        elif rec.timed_out(now_ts, dict(timeouts) if timeouts is not None else None) and not (
            rec.node_name and rec.node_name in busy_nodes
        ):
            terminate.append(SweepTerminate(inst, SweepReason.LEASE_EXPIRED))
    close: list[SweepClose] = []
    if listing_complete:
        for rec in sorted(by_id.values(), key=lambda r: r.instance_id):
            if rec.state.terminal or rec.instance_id in present:
                continue
            if now_ts - rec.entered_state_ts >= grace_s:
                close.append(SweepClose(rec.instance_id, SweepReason.INSTANCE_GONE))
    return SweepPlan(tuple(terminate), tuple(close))
