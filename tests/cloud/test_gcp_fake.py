"""GCP: the real google-cloud-compute REST clients against the project's fake Compute API
(provisioner.testing.fake_gce; Google publishes no Compute Engine emulator)."""

from __future__ import annotations

import uuid

import pytest
from cloud_helpers import ATTEMPTS, CONTROLLER, GcpEnv, gcp_spec

from provisioner.act.backoff_feed import BackoffSettings
from provisioner.act.ports import COST_TAGS, CloudPorts, request_token
from provisioner.act.scale_up import scale_up_with_fallback
from provisioner.act.shapes import gcp_template_name
from provisioner.act.sweep import SweepReason, plan_sweep
from provisioner.act.terminate import terminate_instance
from provisioner.domain.errors import CapacityError, QuotaError, ThrottlingError
from provisioner.domain.offers import CapacityType
from provisioner.plan.backoff import Backoff

pytestmark = pytest.mark.gcp

NOW = 1_800_000_000.0
SETTINGS = BackoffSettings(initial_s=300, max_s=3600)


def ports(env: GcpEnv) -> dict[str, CloudPorts]:
    return {"gcp": CloudPorts(env.driver, env.capacity)}


def group_instances(env: GcpEnv, group: str) -> list[str]:
    return sorted(
        name
        for (_, name), inst in env.fake.instances.items()
        if any(i["value"].endswith(f"/{group}") for i in inst.get("metadata", {}).get("items", []))
    )


def test_template_and_group_are_created_with_guardrails(gce: GcpEnv) -> None:
    spec = gcp_spec()
    gce.driver.ensure(spec)
    gce.driver.ensure(spec)  # idempotent: found, nothing inserted again

    tpl_posts = gce.fake.sent("POST", "/global/instanceTemplates")
    mig_posts = gce.fake.sent("POST", "/regions/us-central1/instanceGroupManagers")
    assert len(tpl_posts) == 1 and len(mig_posts) == 1
    props = tpl_posts[0]["body"]["properties"]
    assert props["machineType"] == "a2-highgpu-1g"
    assert props["guestAccelerators"] == [
        {"acceleratorType": "nvidia-tesla-a100", "acceleratorCount": 1}
    ]
    assert props["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert props["scheduling"]["provisioningModel"] == "SPOT"
    assert props["scheduling"]["instanceTerminationAction"] == "DELETE"
    assert "accessConfigs" not in props["networkInterfaces"][0]  # no external IP
    assert all(props["labels"][k] for k in COST_TAGS)
    assert props["labels"]["team"] == "nlp"
    assert props["metadata"]["items"] == [{"key": "user-data", "value": spec.user_data}]

    mig = mig_posts[0]["body"]
    assert mig["name"] == spec.group_name
    assert mig["targetSize"] == 0
    assert mig["instanceTemplate"].endswith(f"/instanceTemplates/{gcp_template_name(spec)}")
    assert [z["zone"] for z in mig["distributionPolicy"]["zones"]] == [
        "zones/us-central1-a",
        "zones/us-central1-b",
    ]
    # every mutating call carries a requestId (a UUID)
    for req in tpl_posts + mig_posts:
        uuid.UUID(req["query"]["requestId"])
    # operations were waited on at the fake, not at compute.googleapis.com
    assert gce.fake.sent("POST", "/wait")


def test_standard_provisioning_for_on_demand(gce: GcpEnv) -> None:
    gce.driver.ensure(gcp_spec(capacity=CapacityType.ON_DEMAND))
    sched = gce.fake.sent("POST", "/global/instanceTemplates")[0]["body"]["properties"][
        "scheduling"
    ]
    assert sched["provisioningModel"] == "STANDARD" and "instanceTerminationAction" not in sched


def test_shape_change_points_the_group_at_a_new_template(gce: GcpEnv) -> None:
    gce.driver.ensure(gcp_spec())
    new = gcp_spec(image="projects/p/global/images/other")
    gce.driver.ensure(new)
    mig = gce.fake.migs[("us-central1", new.group_name)]
    assert mig["instanceTemplate"].endswith(gcp_template_name(new))
    assert len(gce.fake.templates) == 2


def test_resize_and_delete_one_instance(gce: GcpEnv) -> None:
    spec = gcp_spec()
    gce.driver.ensure(spec)
    gce.capacity.resize(spec, 3, request_token("up"))
    status = gce.capacity.group_status(spec)
    assert (status.desired, status.launched, status.failure) == (3, 3, None)
    assert len(group_instances(gce, spec.group_name)) == 3

    owned = gce.capacity.list_owned(CONTROLLER)
    assert len(owned) == 3
    assert {o.group for o in owned} == {spec.group_name}
    assert {o.zone for o in owned} <= {"us-central1-a", "us-central1-b"}
    assert all(o.tags["decision"] == spec.decision_id for o in owned)

    victim = owned[0]
    assert terminate_instance(victim, "d-down", gce.capacity) is None
    sent = gce.fake.sent("POST", f"/{spec.group_name}/deleteInstances")
    assert sent[0]["body"]["instances"] == [f"zones/{victim.zone}/instances/{victim.instance_id}"]
    status = gce.capacity.group_status(spec)
    assert (status.desired, status.launched) == (2, 2)  # deleted with decrement, not replaced
    assert victim.instance_id not in group_instances(gce, spec.group_name)

    gce.capacity.resize(spec, 0, request_token("down"))
    assert gce.capacity.list_owned(CONTROLLER) == []


def test_stockout_moves_to_the_next_offer(gce: GcpEnv) -> None:
    gce.fake.set_capacity("us-central1", "a2-highgpu-1g", 1)
    central, west = gcp_spec("us-central1"), gcp_spec("europe-west4")
    out = scale_up_with_fallback(
        [central, west], 3, ports=ports(gce), backoff=Backoff(), now_ts=NOW, settings=SETTINGS
    )
    assert [(p.offer.region, p.added) for p in out.placed] == [
        ("us-central1", 1),
        ("europe-west4", 2),
    ]
    assert [(type(f.error), f.error.code) for f in out.failed] == [
        (CapacityError, "ZONE_RESOURCE_POOL_EXHAUSTED")
    ]
    assert out.backoff.blocked(central.offer, NOW) and not out.backoff.blocked(west.offer, NOW)
    assert gce.fake.migs[("us-central1", central.group_name)]["targetSize"] == 1


def test_stockout_reported_by_the_operation_is_a_capacity_error(gce: GcpEnv) -> None:
    central, west = gcp_spec("us-central1"), gcp_spec("europe-west4")
    gce.fake.add_fault(
        method="POST",
        path_contains=f"/regions/us-central1/instanceGroupManagers/{central.group_name}/resize",
        op_error="ZONE_RESOURCE_POOL_EXHAUSTED",
    )
    out = scale_up_with_fallback(
        [central, west], 2, ports=ports(gce), backoff=Backoff(), now_ts=NOW, settings=SETTINGS
    )
    assert [type(f.error) for f in out.failed] == [CapacityError]
    assert [(p.offer.region, p.added) for p in out.placed] == [("europe-west4", 2)]


def test_quota_exceeded_is_not_retried_and_backs_off(gce: GcpEnv) -> None:
    spec = gcp_spec()
    gce.fake.add_fault(
        method="POST",
        path_contains="/global/instanceTemplates",
        http_status=403,
        reason="quotaExceeded",
        times=9,
    )
    out = scale_up_with_fallback(
        [spec], 1, ports=ports(gce), backoff=Backoff(), now_ts=NOW, settings=SETTINGS
    )
    assert [type(f.error) for f in out.failed] == [QuotaError]
    assert len(gce.fake.sent("POST", "/global/instanceTemplates")) == 1
    assert out.backoff.blocked(spec.offer, NOW)


def test_rate_limits_are_retried_with_the_same_request_id(gce: GcpEnv) -> None:
    spec = gcp_spec()
    gce.driver.ensure(spec)
    path = f"/instanceGroupManagers/{spec.group_name}/resize"
    gce.fake.add_fault(method="POST", path_contains=path, http_status=429, times=1)
    gce.fake.add_fault(
        method="POST", path_contains=path, http_status=403, reason="rateLimitExceeded"
    )
    token = request_token("resize-once")
    gce.capacity.resize(spec, 2, token)
    sent = gce.fake.sent("POST", path)
    assert len(sent) == 3 and {r["query"]["requestId"] for r in sent} == {token}
    assert gce.capacity.group_status(spec).desired == 2
    # the same request again (a retry after a crash) is answered from the first operation
    gce.capacity.resize(spec, 2, token)
    assert gce.capacity.group_status(spec).launched == 2


def test_rate_limit_that_persists_raises_throttling(gce: GcpEnv) -> None:
    spec = gcp_spec()
    gce.driver.ensure(spec)
    gce.fake.add_fault(method="POST", path_contains="/resize", http_status=429, times=99)
    with pytest.raises(ThrottlingError):
        gce.capacity.resize(spec, 1, request_token("x"))
    assert len(gce.fake.sent("POST", "/resize")) == ATTEMPTS


def test_orphan_created_by_hand_is_swept(gce: GcpEnv) -> None:
    from google.cloud import compute_v1

    spec = gcp_spec()
    gce.driver.ensure(spec)
    gce.capacity.resize(spec, 1, request_token("one"))
    gce.clients.instances().insert_unary(
        project="burst-proj",
        zone="us-central1-f",
        instance_resource=compute_v1.Instance(
            name="hand-made", machine_type="a2-highgpu-1g", labels={"controller": CONTROLLER}
        ),
    )
    owned = gce.capacity.list_owned(CONTROLLER)
    orphan = next(o for o in owned if o.instance_id == "hand-made")
    assert orphan.group == ""
    assert orphan.launched_ts is not None
    plan = plan_sweep(
        owned,
        [],
        controller=CONTROLLER,
        now_ts=orphan.launched_ts + 601,
        grace_s=600,
        first_seen={o.instance_id: orphan.launched_ts for o in owned},
    )
    assert {(t.instance.instance_id, t.reason) for t in plan.terminate} >= {
        ("hand-made", SweepReason.ORPHAN)
    }
    assert terminate_instance(orphan, "sweep", gce.capacity) is None
    assert ("us-central1-f", "hand-made") not in gce.fake.instances
    assert gce.fake.sent("DELETE", "/zones/us-central1-f/instances/hand-made")
    assert gce.capacity.group_status(spec).desired == 1


def test_delete_removes_group_and_template(gce: GcpEnv) -> None:
    spec = gcp_spec()
    gce.driver.ensure(spec)
    gce.capacity.resize(spec, 2, request_token("two"))
    gce.driver.delete(spec)
    assert not gce.capacity.group_status(spec).exists
    assert gce.fake.templates == {} and gce.fake.instances == {}
    gce.driver.delete(spec)  # deleting again is fine
