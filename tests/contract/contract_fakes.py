"""An in-memory cloud: a `PoolDriver` and a `CloudCapacity` over one dict of groups and instances.

No in-memory fake of the cloud ports existed, so this one is held to the same contract suite as
the AWS and GCP adapters (tests/contract/test_cloud_capacity_contract.py). It keeps the cloud's
side of the world (`instances`, `groups`) apart from the port, so tests read the truth from it as
they read boto3's or the GCE fake's records. Faults are raised below the one retry policy, as a
cloud's answers are, so the port retries what the real adapters retry. `set_capacity` limits how
many more instances of a type a region can launch: a group then stays short of its size and
reports the stockout, as ASGs and MIGs do.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from tenacity import Retrying

from provisioner.act.ports import (
    TAG_CONTROLLER,
    CloudState,
    GroupStatus,
    OwnedInstance,
    PoolSpec,
    check_target,
)
from provisioner.act.retry import cloud_retrying
from provisioner.domain.errors import CapacityError, CloudError, NotFoundError

T = TypeVar("T")


@dataclass
class FakeInstance:
    instance_id: str
    region: str
    zone: str
    instance_type: str
    group: str
    tags: dict[str, str]
    launched_ts: float
    private_ip: str = ""
    node: str = ""  # the Slurm node named on it (its metadata shows it to it alone)


@dataclass
class FakeGroup:
    spec: PoolSpec
    desired: int = 0
    members: list[str] = field(default_factory=list)
    failure: CloudError | None = None


class InMemoryCloud:
    cloud = "fake"

    def __init__(self, retrying: Retrying | None = None) -> None:
        self.retrying = retrying or cloud_retrying()
        self.groups: dict[tuple[str, str], FakeGroup] = {}
        self.instances: dict[str, FakeInstance] = {}
        self.stock: dict[tuple[str, str], int] = {}  # (region, instance type) -> launches left
        self.faults: list[tuple[str, CloudError, list[int]]] = []  # (operation, error, [times])
        self._tokens: set[str] = set()
        self._ids = itertools.count(1)
        self.driver = _Driver(self)
        self.capacity = _Capacity(self)

    # ------------------------------------------------------------------ test controls
    def fail(self, operation: str, error: CloudError, times: int = 1) -> None:
        self.faults.append((operation, error, [times]))

    def set_capacity(self, region: str, instance_type: str, count: int) -> None:
        self.stock[(region, instance_type)] = count

    # ------------------------------------------------------------------ the cloud's side
    def call(self, operation: str, fn: Callable[[], T]) -> T:
        def attempt() -> T:
            for op, error, left in self.faults:
                if op == operation and left[0] > 0:
                    left[0] -= 1
                    raise error
            return fn()

        return self.retrying(attempt)

    def _fill(self, group: FakeGroup) -> None:
        spec = group.spec
        while len(group.members) > group.desired:  # the newest go first
            self.instances.pop(group.members.pop(), None)
        key = (spec.region, spec.instance_type)
        while len(group.members) < group.desired:
            if self.stock.get(key, 1) <= 0:
                group.failure = CapacityError(
                    f"fake: no {spec.instance_type} capacity in {spec.region}",
                    code="InsufficientInstanceCapacity",
                    offer=str(spec.offer),
                )
                return
            if key in self.stock:
                self.stock[key] -= 1
            n = next(self._ids)
            zones = spec.zones or (f"{spec.region}-a",)
            self.instances[f"fake-{n:06d}"] = FakeInstance(
                instance_id=f"fake-{n:06d}",
                region=spec.region,
                zone=zones[n % len(zones)],
                instance_type=spec.instance_type,
                group=spec.group_name,
                tags=dict(spec.tags),
                launched_ts=1_800_000_000.0 + n,
                private_ip=f"10.1.{n // 250}.{n % 250 + 4}",
            )
            group.members.append(f"fake-{n:06d}")
        group.failure = None


class _Driver:
    def __init__(self, world: InMemoryCloud) -> None:
        self.w = world

    def ensure(self, spec: PoolSpec) -> None:
        def do() -> None:
            key = (spec.region, spec.group_name)
            if key in self.w.groups:
                self.w.groups[key].spec = spec
            else:
                self.w.groups[key] = FakeGroup(spec)

        self.w.call("ensure", do)

    def delete(self, spec: PoolSpec) -> None:
        def do() -> None:
            group = self.w.groups.pop((spec.region, spec.group_name), None)
            for iid in group.members if group else ():
                self.w.instances.pop(iid, None)

        self.w.call("delete", do)


class _Capacity:
    cloud = "fake"

    def __init__(self, world: InMemoryCloud) -> None:
        self.w = world

    def list_owned(self, controller: str) -> Sequence[OwnedInstance]:
        def do() -> list[OwnedInstance]:
            return [
                OwnedInstance(
                    instance_id=i.instance_id,
                    cloud="fake",
                    region=i.region,
                    zone=i.zone,
                    instance_type=i.instance_type,
                    state=CloudState.RUNNING,
                    launched_ts=i.launched_ts,
                    group=i.group,
                    tags=dict(i.tags),
                    private_ip=i.private_ip,
                    named_node=i.node,
                )
                for i in self.w.instances.values()
                if i.tags.get(TAG_CONTROLLER) == controller
            ]

        return self.w.call("list_owned", do)

    def group_status(self, spec: PoolSpec) -> GroupStatus:
        def do() -> GroupStatus:
            group = self.w.groups.get((spec.region, spec.group_name))
            if group is None:
                return GroupStatus(exists=False)
            return GroupStatus(True, group.desired, len(group.members), group.failure)

        return self.w.call("group_status", do)

    def resize(self, spec: PoolSpec, target: int, token: str) -> None:
        check_target(spec, target)

        def do() -> None:
            group = self.w.groups.get((spec.region, spec.group_name))
            if group is None:
                raise CloudError(f"fake: no group {spec.group_name}", code="NotFound")
            if token in self.w._tokens:
                return  # the change this token asked for was done already
            group.spec, group.desired = spec, target
            self.w._fill(group)
            self.w._tokens.add(token)

        self.w.call("resize", do)

    def name_node(self, instance: OwnedInstance, node: str) -> None:
        def do() -> None:
            inst = self.w.instances.get(instance.instance_id)
            if inst is None:
                raise NotFoundError(f"fake: no instance {instance.instance_id}", code="NotFound")
            inst.node = node

        self.w.call("name_node", do)

    def terminate(self, instance: OwnedInstance, token: str) -> None:
        def do() -> None:
            gone = self.w.instances.pop(instance.instance_id, None)
            if gone is None:
                return  # already gone: not an error
            group = self.w.groups.get((gone.region, gone.group))
            if group is not None and gone.instance_id in group.members:
                group.members.remove(gone.instance_id)
                group.desired -= 1  # decremented, so the group launches no replacement

        self.w.call("terminate", do)
