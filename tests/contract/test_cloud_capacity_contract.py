"""The `CloudCapacity` port (with the `PoolDriver` that creates its groups), one suite for every
implementation: the in-memory fake, AWS against moto's server, GCP against the GCE fake.

Each implementation is held to what provisioner/act/ports.py promises: a group exists once the
driver made it; a resize makes the group hold exactly its target, and the same token twice is one
change; `list_owned` finds exactly this controller's live instances, tagged with the controller,
pool, team and decision; `terminate` removes an instance and shrinks its group so nothing
replaces it, and an instance already gone is not an error; a resize past the pool's max, a cloud
error the fault layer injects, and a stockout all come back as the typed `CloudError` taxonomy.
Expected values are read from the cloud's own records (boto3 describe calls, the GCE fake's
dicts, the in-memory cloud's dicts), never from the port under test.
"""

from __future__ import annotations

import pytest
from cloud_envs import FAULTS, OTHER_CONTROLLER, CloudEnv

from provisioner.act.ports import OwnedInstance, request_token
from provisioner.domain.errors import CapacityError, CloudError

COST_KEYS = ("controller", "pool", "team", "decision")


def alive(env: CloudEnv, controller: str) -> dict[str, OwnedInstance]:
    return {o.instance_id: o for o in env.capacity.list_owned(controller) if o.state.alive}


def test_a_group_exists_once_the_driver_made_it(cloud: CloudEnv) -> None:
    spec = cloud.make_spec()
    assert not cloud.capacity.group_status(spec).exists
    assert cloud.desired(spec) is None
    cloud.driver.ensure(spec)
    cloud.driver.ensure(spec)  # twice is the same group
    status = cloud.capacity.group_status(spec)
    assert (status.exists, status.desired, status.launched, status.failure) == (True, 0, 0, None)
    assert cloud.desired(spec) == 0
    assert cloud.live(spec.controller) == {}


def test_resize_holds_the_target_and_lists_it_with_our_tags(cloud: CloudEnv) -> None:
    spec = cloud.make_spec()
    cloud.driver.ensure(spec)
    cloud.capacity.resize(spec, 3, request_token("up", 3))

    truth = cloud.live(spec.controller)
    assert len(truth) == 3 and cloud.desired(spec) == 3
    owned = alive(cloud, spec.controller)
    assert set(owned) == set(truth)
    for iid, inst in owned.items():
        assert (inst.region, inst.instance_type, inst.group) == (
            spec.region,
            spec.instance_type,
            spec.group_name,
        )
        assert {k: inst.tags[k] for k in COST_KEYS} == {k: truth[iid][k] for k in COST_KEYS}
        assert {k: inst.tags[k] for k in COST_KEYS} == {k: spec.tags[k] for k in COST_KEYS}
    status = cloud.capacity.group_status(spec)
    assert (status.desired, status.launched, status.failure) == (3, 3, None)


def test_the_same_token_twice_is_one_change(cloud: CloudEnv) -> None:
    spec = cloud.make_spec()
    cloud.driver.ensure(spec)
    token = request_token(spec.decision_id, spec.group_name, "resize", 2)
    cloud.capacity.resize(spec, 2, token)
    first = cloud.live(spec.controller)
    cloud.capacity.resize(spec, 2, token)  # a retry after a crash sends the same token
    assert cloud.live(spec.controller) == first and len(first) == 2
    assert cloud.desired(spec) == 2
    assert set(alive(cloud, spec.controller)) == set(first)


def test_resize_down_and_the_listing_agree_with_the_cloud(cloud: CloudEnv) -> None:
    """A resize below the members: a MIG deletes members (GCE); an AWS group, its members
    protected from scale-in, ends none of them (the controller ends members by name). Either
    way the listing is what the cloud runs."""
    spec = cloud.make_spec()
    cloud.driver.ensure(spec)
    cloud.capacity.resize(spec, 3, request_token("up", 3))
    cloud.capacity.resize(spec, 1, request_token("down", 1))
    truth = cloud.live(spec.controller)
    assert len(truth) == (3 if cloud.name == "aws" else 1) and cloud.desired(spec) == 1
    assert set(alive(cloud, spec.controller)) == set(truth)


def test_list_owned_finds_only_this_controllers_instances(cloud: CloudEnv) -> None:
    mine, theirs = cloud.make_spec(), cloud.make_spec(controller=OTHER_CONTROLLER)
    assert mine.group_name != theirs.group_name
    for spec, n in ((mine, 1), (theirs, 2)):
        cloud.driver.ensure(spec)
        cloud.capacity.resize(spec, n, request_token(spec.controller, n))
    ours, other = cloud.live(mine.controller), cloud.live(OTHER_CONTROLLER)
    assert (len(ours), len(other)) == (1, 2)
    assert set(alive(cloud, mine.controller)) == set(ours)
    assert set(alive(cloud, OTHER_CONTROLLER)) == set(other)
    assert not {o.instance_id for o in cloud.capacity.list_owned(mine.controller)} & set(other)


def test_terminate_removes_the_instance_and_shrinks_its_group(cloud: CloudEnv) -> None:
    spec = cloud.make_spec()
    cloud.driver.ensure(spec)
    cloud.capacity.resize(spec, 3, request_token("up", 3))
    victim, *rest = sorted(alive(cloud, spec.controller).values(), key=lambda o: o.instance_id)

    cloud.capacity.terminate(victim, request_token("terminate", victim.instance_id))
    truth = cloud.live(spec.controller)
    assert set(truth) == {o.instance_id for o in rest}  # no replacement was launched
    assert cloud.desired(spec) == 2
    assert victim.instance_id not in alive(cloud, spec.controller)
    status = cloud.capacity.group_status(spec)
    assert (status.desired, status.launched) == (2, 2)

    # terminating it again (a retry, a second pass) is not an error and changes nothing more
    cloud.capacity.terminate(victim, request_token("terminate again", victim.instance_id))
    assert cloud.live(spec.controller) == truth and cloud.desired(spec) == 2


def test_resize_past_the_pools_max_is_refused_and_changes_nothing(cloud: CloudEnv) -> None:
    spec = cloud.make_spec(max_size=2)
    cloud.driver.ensure(spec)
    cloud.capacity.resize(spec, 1, request_token("one"))
    with pytest.raises(CloudError) as info:
        cloud.capacity.resize(spec, 3, request_token("too many"))
    assert info.value.offer == str(spec.offer)
    assert cloud.desired(spec) == 1 and len(cloud.live(spec.controller)) == 1


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_a_persistent_cloud_error_is_typed_and_changes_nothing(cloud: CloudEnv, kind: str) -> None:
    spec = cloud.make_spec()
    cloud.driver.ensure(spec)
    cloud.inject(spec, kind, 99)
    with pytest.raises(FAULTS[kind][0]):
        cloud.capacity.resize(spec, 2, request_token(kind))
    assert cloud.desired(spec) == 0 and cloud.live(spec.controller) == {}


def test_a_single_throttle_is_retried_and_the_resize_happens(cloud: CloudEnv) -> None:
    spec = cloud.make_spec()
    cloud.driver.ensure(spec)
    cloud.inject(spec, "throttling", 1)
    cloud.capacity.resize(spec, 2, request_token("after a throttle"))
    assert cloud.desired(spec) == 2 and len(cloud.live(spec.controller)) == 2


def test_a_stockout_leaves_a_shortfall_reported_as_a_capacity_error(cloud: CloudEnv) -> None:
    spec = cloud.make_spec()
    cloud.driver.ensure(spec)
    cloud.limit(spec, 1)
    cloud.capacity.resize(spec, 3, request_token("stockout"))  # accepted; the cloud falls short
    truth = cloud.live(spec.controller)
    assert len(truth) == 1
    assert set(alive(cloud, spec.controller)) == set(truth)
    status = cloud.capacity.group_status(spec)
    assert (status.desired, status.launched, status.shortfall) == (3, 1, 2)
    assert isinstance(status.failure, CapacityError)
    assert status.failure.backoff_offer


def test_each_instance_lists_its_own_address_and_is_named_its_own_node(cloud: CloudEnv) -> None:
    spec = cloud.make_spec()
    cloud.driver.ensure(spec)
    cloud.capacity.resize(spec, 2, request_token("up", 2))
    owned = alive(cloud, spec.controller)
    a, b = sorted(owned)
    # The address the listing gives is the one the cloud holds for that instance.
    assert {iid: o.private_ip for iid, o in owned.items()} == {
        iid: cloud.identity(iid)[1] for iid in owned
    }
    assert owned[a].private_ip and owned[a].private_ip != owned[b].private_ip
    cloud.capacity.name_node(owned[a], "gpu-contract-2")
    cloud.capacity.name_node(owned[b], "gpu-contract-1")
    assert cloud.identity(a)[0] == "gpu-contract-2" and cloud.identity(b)[0] == "gpu-contract-1"
    cloud.capacity.name_node(owned[a], "gpu-contract-3")  # named again: the new name holds
    assert cloud.identity(a)[0] == "gpu-contract-3" and cloud.identity(b)[0] == "gpu-contract-1"
