"""Spot warnings for the moto stand-in: what EC2 puts in a spot instance's metadata before it
takes the instance away, and the taking (moto has neither).

Faithful to the EC2 User Guide (docs/clouds.md, "Spot warnings"):
* **Interruption notice** ("Spot Instance interruption notices"): two minutes before EC2
  interrupts the instance, `spot/instance-action` in its instance metadata answers
  `{"action": "terminate", "time": "<when, UTC>"}` (404 before); at that time the instance is
  terminated.
* **Rebalance recommendation** ("EC2 instance rebalance recommendations"): an earlier signal
  that the instance is at elevated risk; `events/recommendations/rebalance` answers
  `{"noticeTime": "<when>"}` (404 before). Nothing is taken away by it.
Both are stamped on the stand-in's clock. The IMDS stand-in reads them over HTTP
(`GET /_spot/<instance id>` on moto's server); tests set them with `FaultyMotoServer.warn_spot`
and `recommend_rebalance`.

Simplified: the notice is given when a test asks (EC2 decides by itself), only `terminate` is
modelled (not `stop` or `hibernate`), and the group launches no replacement for the member
taken (a real group, its desired capacity unchanged, would).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from provisioner.testing.asg_autonomy import ACCOUNT

NOTICE_S = 120.0  # EC2's two-minute warning


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Notice:
    region: str
    rebalance_at: datetime | None = None
    action_at: datetime | None = None
    carried_out: bool = False


@dataclass
class SpotNotices:
    _by_id: dict[str, _Notice] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def warn(self, instance_id: str, region: str, now: datetime, lead_s: float = NOTICE_S) -> None:
        with self.lock:
            n = self._by_id.setdefault(instance_id, _Notice(region))
            n.action_at = now + timedelta(seconds=lead_s)

    def recommend_rebalance(self, instance_id: str, region: str, now: datetime) -> None:
        with self.lock:
            self._by_id.setdefault(instance_id, _Notice(region)).rebalance_at = now

    def metadata(self, instance_id: str) -> dict[str, Any]:
        """What the instance's metadata holds: `instance_action` and `rebalance` (None: 404)."""
        with self.lock:
            n = self._by_id.get(instance_id)
        if n is None:
            return {"instance_action": None, "rebalance": None}
        action = {"action": "terminate", "time": _iso(n.action_at)} if n.action_at else None
        rebalance = {"noticeTime": _iso(n.rebalance_at)} if n.rebalance_at else None
        return {"instance_action": action, "rebalance": rebalance}

    def carry_out(self, now: datetime) -> list[str]:
        """Terminate each warned instance whose time has come (in moto's in-process backends);
        the ids taken."""
        with self.lock:
            due = [
                (iid, n)
                for iid, n in self._by_id.items()
                if n.action_at is not None and n.action_at <= now and not n.carried_out
            ]
            for _, n in due:
                n.carried_out = True
        for iid, n in due:
            _take(iid, n.region)
        return [iid for iid, _ in due]

    def clear(self) -> None:
        with self.lock:
            self._by_id.clear()


def _take(instance_id: str, region: str) -> None:
    from moto.autoscaling.models import autoscaling_backends
    from moto.ec2.models import ec2_backends

    for group in autoscaling_backends[ACCOUNT][region].autoscaling_groups.values():
        group.instance_states = [s for s in group.instance_states if s.instance.id != instance_id]
    ec2 = ec2_backends[ACCOUNT][region]
    running = {
        i.id
        for r in ec2.reservations.values()
        for i in r.instances
        if i.state in ("pending", "running")
    }
    if instance_id in running:  # one already ended keeps its own end
        ec2.terminate_instances([instance_id])


__all__ = ["NOTICE_S", "SpotNotices"]
