"""A preempted spot VM in a managed instance group, held against the GCP port over the GCE fake
(provisioner/testing/fake_gce.py `preempt`): the VM's own metadata says so first, 30 s later
the group recreates it under the same name, and the controller's sync closes the record the
old VM stood for and ends the new one. The truth is the fake's own table of VMs and groups.

GCE: https://cloud.google.com/compute/docs/instances/spot#preemption-process (about 30 s
between the notice and the stop) and .../instance-groups/working-with-managed-instances
(a MIG recreates its preempted VMs, under the same name)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from cloud_envs import CONTROLLER, gcp_env

from provisioner.act.ports import request_token
from provisioner.domain.instances import CloudInstance, InstanceState, Transition
from provisioner.domain.nodes import Node, NodeKind, NodeState
from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.domain.records import StoredInstance
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.reconcile.listing_memory import ListingMemory
from provisioner.reconcile.sync import SyncInput, plan_sync
from provisioner.testing.fake_gce import FakeGCE
from provisioner.testing.gce_metadata import GceMetadata

pytestmark = pytest.mark.gcp
S = InstanceState
PREEMPTED = "/computeMetadata/v1/instance/preempted"


def test_a_preempted_member_is_flagged_then_recreated_and_its_record_does_not_carry_over() -> None:
    now = [datetime(2026, 12, 5, 12, 0, tzinfo=UTC)]
    fake = FakeGCE(op_polls_until_done=2, clock=lambda: now[0]).start()
    try:
        cloud = gcp_env(fake)
        spec = cloud.make_spec(capacity=CapacityType.SPOT)
        cloud.driver.ensure(spec)
        cloud.capacity.resize(spec, 1, request_token("one"))
        (o1,) = cloud.capacity.list_owned(CONTROLLER)
        ((zone, name),) = fake.instances
        first_id = fake.instances[(zone, name)]["id"]
        memory = ListingMemory()
        memory.observe([o1], True, [name], now[0].timestamp())

        meta = GceMetadata(fake.endpoint, "burst-proj", zone, name)
        assert meta.answer(PREEMPTED) == "FALSE"
        now[0] += timedelta(minutes=10)  # it ran, joined and took work
        fake.preempt(zone, name)
        assert meta.answer(PREEMPTED) == "TRUE"  # the VM's own warning, 30 s ahead
        now[0] += timedelta(seconds=29)
        assert fake.take_due_preemptions() == []
        now[0] += timedelta(seconds=1)
        assert fake.take_due_preemptions() == [name]
        recreated = fake.instances[(zone, name)]
        assert recreated["id"] != first_id  # another machine under the same name
        assert meta.answer(PREEMPTED) == "FALSE"

        (o2,) = cloud.capacity.list_owned(CONTROLLER)
        assert o2.instance_id == name and o2.launched_ts == now[0].timestamp()
        memory.observe([o2], True, [name], now[0].timestamp())
        node = Node("burst-gcp-1", NodeKind.BURST, 8, 8, "a100", NodeState.ALLOCATED,
                    ("cloud",), ("cloud",), 100, pool=spec.pool)  # fmt: skip
        offer = OfferKey("gcp", spec.region, spec.instance_type, CapacityType.SPOT)
        start = o1.launched_ts or 0.0
        rec = CloudInstance(
            name, spec.pool, offer, "A100", 8, Decimal("15.42"), S.READY, start,
            node_name="burst-gcp-1",
            history=(Transition(None, S.REQUESTED, start, ""),
                     Transition(S.REQUESTED, S.READY, start + 90, "")),
        )  # fmt: skip
        plan = plan_sync(
            SyncInput(
                now[0].timestamp(),
                CONTROLLER,
                [StoredInstance(rec)],
                [o2],
                True,
                ClusterSnapshot(taken_ts=now[0].timestamp(), nodes=(node,)),
                first_start=memory.first_start,
            )
        )
        (kill,) = plan.kills
        assert (kill.fail_node, kill.transition) == ("burst-gcp-1", True)
        cloud.capacity.terminate(kill.owned, request_token("end", name))
        assert fake.instances == {}
        assert int(fake.migs[(spec.region, spec.group_name)]["targetSize"]) == 0  # not again
        # the cloud's bill: the first VM until the stop, the second until the end
        assert [v.deleted_ts for v in fake.retired] == [now[0].timestamp()]
    finally:
        fake.stop()


def test_a_preempted_vm_of_no_group_stops_and_stays_listed_stopped(
    gcp_and_fake: tuple[Any, Any],
) -> None:
    cloud, fake = gcp_and_fake
    spec = cloud.make_spec()
    cloud.driver.ensure(spec)
    cloud.capacity.resize(spec, 1, request_token("one"))
    ((zone, name),) = fake.instances
    fake.members.clear()  # as if it had been made on its own, not by a group
    fake.preempt(zone, name, notice_s=0)
    assert fake.take_due_preemptions() == [name]
    assert fake.instances[(zone, name)]["status"] == "TERMINATED"
