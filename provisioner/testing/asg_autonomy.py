"""What a real EC2 Auto Scaling group does on its own, for the moto stand-in (moto models the
processes' names and suspension, but never runs them).

Faithful to the EC2 Auto Scaling User Guide (see docs/clouds.md, "Groups that act on their
own"):

* **AZRebalance** ("Rebalancing activities"): when zones hold uneven numbers of members, the
  group launches new instances in the emptier zones first and then terminates members in the
  fuller ones, running or not: their jobs die with them. `rebalance(group)` does one such
  swap (one new member, then the oldest member ends) unless the process is suspended.
* **ReplaceUnhealthy** ("Health checks for instances in an Auto Scaling group"): a member that
  fails a health check is terminated and replaced by a new instance nobody asked for.
  `replace_unhealthy(group, instance)` does it unless the process is suspended.

Simplified: the stand-in acts only when a test calls it (a real group decides by itself, on
its own schedule), the swap ignores zones, and the replacement gets the group's propagated
tags as moto gives them.
"""

from __future__ import annotations

from typing import Any

ACCOUNT = "123456789012"  # moto's default account


def _group(region: str, name: str) -> Any:
    from moto.autoscaling.models import autoscaling_backends

    return autoscaling_backends[ACCOUNT][region].autoscaling_groups[name]


def _suspended(group: Any) -> set[str]:
    return {str(p["ProcessName"]) for p in group.suspended_processes}


def _launch_one(group: Any) -> str:
    before = {s.instance.id for s in group.instance_states}
    group.replace_autoscaling_group_instances(1, group.get_propagated_tags())
    (new,) = [s.instance.id for s in group.instance_states if s.instance.id not in before]
    return str(new)


def _end(group: Any, instance_id: str) -> None:
    group.autoscaling_backend.ec2_backend.terminate_instances([instance_id])
    group.instance_states = [s for s in group.instance_states if s.instance.id != instance_id]


def rebalance(region: str, name: str) -> tuple[str, str] | None:
    """One AZRebalance swap: (the member launched, the member ended), or None when the group's
    AZRebalance is suspended or it has no member."""
    group = _group(region, name)
    if "AZRebalance" in _suspended(group) or not group.instance_states:
        return None
    oldest = min(group.instance_states, key=lambda s: s.instance.launch_time).instance.id
    new = _launch_one(group)  # new first, as AWS does: capacity never drops below desired
    _end(group, oldest)
    return new, str(oldest)


def replace_unhealthy(region: str, name: str, instance_id: str) -> str | None:
    """The member marked unhealthy ends and a new one replaces it (its id), or None when the
    group's ReplaceUnhealthy is suspended."""
    group = _group(region, name)
    if "ReplaceUnhealthy" in _suspended(group):
        return None
    _end(group, instance_id)
    return _launch_one(group)


def capacity_rebalance(region: str, name: str, instance_id: str) -> str | None:
    """A rebalance recommendation for a spot member ("Capacity Rebalancing"): with the group's
    CapacityRebalance on, a new member is launched and the one at risk is then terminated, job
    and all; returns the new member's id, or None when CapacityRebalance is off."""
    group = _group(region, name)
    if not group.capacity_rebalance:
        return None
    new = _launch_one(group)
    _end(group, instance_id)
    return new


def unprotect_for_force_delete(region: str, name: str) -> None:
    """What AWS's DeleteAutoScalingGroup with ForceDelete does that moto does not: the group
    goes "along with all instances associated with the group" (API reference), scale-in
    protection or not. moto deletes by a resize to 0, which spares protected members."""
    from moto.autoscaling.models import autoscaling_backends

    group = autoscaling_backends[ACCOUNT][region].autoscaling_groups.get(name)
    if group is not None:
        for state in group.instance_states:
            state.protected_from_scale_in = False


def set_capacity_rebalance(region: str, name: str, on: bool) -> None:
    """What AWS's UpdateAutoScalingGroup does with `CapacityRebalance` (moto ignores it)."""
    _group(region, name).capacity_rebalance = on
