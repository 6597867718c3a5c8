"""What a cloud listing may be trusted with, held against the GCP port over the GCE fake with
zones that do not answer (provisioner/testing/fake_gce.py `unreachable_zones`, as
`instances.aggregatedList` with `returnPartialSuccess` reports them), and a record that lost its
zone. The truth is the fake's own table of VMs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from cloud_envs import CONTROLLER, CloudEnv

from provisioner.act.ports import PartialListing, request_token
from provisioner.domain.errors import ListingIncomplete

pytestmark = pytest.mark.gcp


def two_zones(cloud: CloudEnv, fake: Any) -> dict[str, str]:
    """Two running VMs of a group spread over two zones: name -> zone, from the fake."""
    spec = cloud.make_spec()
    cloud.driver.ensure(spec)
    cloud.capacity.resize(spec, 2, request_token("two"))
    zones = {name: zone for (zone, name) in fake.instances}
    assert len(set(zones.values())) == 2
    return zones


def test_a_listing_with_an_unreachable_zone_says_it_is_partial(
    gcp_and_fake: tuple[CloudEnv, Any],
) -> None:
    cloud, fake = gcp_and_fake
    zones = two_zones(cloud, fake)
    down = sorted(zones.values())[0]
    fake.unreachable_zones.add(down)
    with pytest.raises(ListingIncomplete, match=down) as raised:
        cloud.capacity.list_owned(CONTROLLER)
    # what the answering zone holds comes with it, and only that
    assert isinstance(raised.value, PartialListing)
    answered = {name for name, zone in zones.items() if zone != down}
    assert {o.instance_id for o in raised.value.listed} == answered
    # its VM is still there: a partial answer is not an end
    assert down in {z for (z, _) in fake.instances}
    fake.unreachable_zones.clear()
    assert {o.instance_id for o in cloud.capacity.list_owned(CONTROLLER)} == set(zones)


def test_ending_an_instance_whose_record_lost_its_zone_still_ends_it(
    gcp_and_fake: tuple[CloudEnv, Any],
) -> None:
    cloud, fake = gcp_and_fake
    zones = two_zones(cloud, fake)
    owned = {o.instance_id: o for o in cloud.capacity.list_owned(CONTROLLER)}
    victim = sorted(zones)[0]
    cloud.capacity.terminate(replace(owned[victim], zone=""), request_token("end", victim))
    assert victim not in {name for (_, name) in fake.instances}
    assert sorted(zones)[1] in {name for (_, name) in fake.instances}
