"""Placement a site sets per pool (zones, subnets and security groups, network, subnetwork and
network tags, root disk): from the policy to the spec, into both clouds' stand-ins by the SDK
path and into the Pulumi programs (the IaC review's line: tests/iac/test_iac_review.py).
Expected values are the policy's own words, as each cloud's API spells them."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest
from cloud_helpers import AwsEnv, GcpEnv, aws_spec, gcp_spec
from test_act_core import IMAGES, OFFERS

from provisioner.act.pulumi_driver import load_pool_program
from provisioner.act.specs import pool_specs
from provisioner.config.models import Policy, PoolPolicy

AWS = PoolPolicy(
    name="aws-a100",
    cloud="aws",
    regions=["us-east-1", "us-west-2"],
    gpu_model="A100",
    instance_types=["p4d.24xlarge"],
    capacity="spot",
    zones=["us-east-1b", "us-east-1c", "us-west-2a"],
    security_groups=["sg-0burst"],
    root_disk_gb=500,
    instance_profile="burst-node",
)
GCP = PoolPolicy(
    name="gcp-l4",
    cloud="gcp",
    regions=["us-central1"],
    gpu_model="L4",
    instance_types=["g2-standard-8"],
    capacity="spot",
    zones=["us-central1-b"],
    network="burst-vpc",
    subnetwork="burst-subnet",
    network_tags=["slurm-node", "gpu-burst"],
    root_disk_gb=300,
)


def specs(*pools: PoolPolicy) -> dict[tuple[str, str], Any]:
    got = pool_specs(Policy(pools=list(pools)), OFFERS, images=IMAGES, project="lab")
    return {(s.pool, s.region): s for s in got}


def test_a_pools_placement_reaches_each_of_its_groups_in_that_groups_region() -> None:
    by = specs(AWS, GCP)
    east, west = by[("aws-a100", "us-east-1")], by[("aws-a100", "us-west-2")]
    assert east.zones == ("us-east-1b", "us-east-1c") and west.zones == ("us-west-2a",)
    assert east.security_groups == ("sg-0burst",) and east.disk_gb == 500
    g = by[("gcp-l4", "us-central1")]
    assert g.network == "global/networks/burst-vpc"
    assert g.subnetwork == "regions/us-central1/subnetworks/burst-subnet"
    assert g.network_tags == ("slurm-node", "gpu-burst") and g.disk_gb == 300
    # a shared VPC of another project is taken as written
    shared = "projects/host/regions/us-central1/subnetworks/shared"
    (s,) = specs(GCP.model_copy(update={"subnetwork": shared})).values()
    assert s.subnetwork == shared
    # defaults: the cloud's own (default network, the group's zones, 200 GB)
    (d,) = specs(PoolPolicy(name="gcp-l4", cloud="gcp", regions=["us-central1"],
                            gpu_model="L4", instance_types=["g2-standard-8"],
                            capacity="spot")).values()  # fmt: skip
    assert (d.network, d.subnetwork, d.zones, d.disk_gb) == ("global/networks/default", "", (), 200)
    # placement is part of the node shape: changing it makes a new template
    assert d.shape_hash != s.shape_hash


@pytest.mark.parametrize(
    ("update", "words"),
    [
        ({"cloud": "gcp", "regions": ["us-central1"], "zones": []}, "security_groups is AWS's"),
        ({"security_groups": [], "network_tags": ["x"]}, "network_tags is GCP's"),
        ({"security_groups": [], "zones": ["eu-west-1a"]}, "'eu-west-1a' of pool aws-a100"),
    ],
)
def test_placement_that_cannot_hold_is_refused_naming_the_field(
    update: dict[str, Any], words: str
) -> None:
    data = {**AWS.model_dump(), "instance_profile": "", **update}
    with pytest.raises(ValueError, match=words):  # InvalidArgument, as pydantic wraps it
        PoolPolicy.model_validate(data)
    with pytest.raises(ValueError, match="network tag 'Bad_Tag'"):
        PoolPolicy.model_validate({**GCP.model_dump(), "network_tags": ["Bad_Tag"]})


def test_the_sdk_path_places_aws_groups_as_the_pool_says(aws: AwsEnv) -> None:
    spec = aws_spec(zones=("us-east-1b", "us-east-1c"), disk_gb=500)
    aws.driver.ensure(spec)
    asg = aws.asg().describe_auto_scaling_groups(AutoScalingGroupNames=[spec.group_name])
    assert sorted(asg["AutoScalingGroups"][0]["AvailabilityZones"]) == ["us-east-1b", "us-east-1c"]
    data = aws.ec2().describe_launch_template_versions(LaunchTemplateName=spec.group_name)[
        "LaunchTemplateVersions"
    ][0]["LaunchTemplateData"]
    assert data["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 500


def test_the_sdk_path_places_gce_groups_as_the_pool_says(gce: GcpEnv) -> None:
    subnet = "regions/us-central1/subnetworks/burst-subnet"
    spec = gcp_spec(
        zones=("us-central1-b",),
        network="global/networks/burst-vpc",
        subnetwork=subnet,
        network_tags=("slurm-node",),
        disk_gb=300,
    )
    gce.driver.ensure(spec)
    (tpl,) = gce.fake.templates.values()
    props = tpl["properties"]
    nic = props["networkInterfaces"][0]
    assert (nic["network"], nic["subnetwork"]) == ("global/networks/burst-vpc", subnet)
    assert "accessConfigs" not in nic  # still no external address
    assert props["tags"] == {"items": ["slurm-node"]}
    assert props["disks"][0]["initializeParams"]["diskSizeGb"] in (300, "300")
    (mig,) = gce.fake.migs.values()
    assert [z["zone"] for z in mig["distributionPolicy"]["zones"]] == ["zones/us-central1-b"]


@pulumi.runtime.test
def test_the_pulumi_programs_place_groups_as_the_pool_says(pulumi_mocks: Any) -> None:
    build = load_pool_program()
    subnet = "regions/us-central1/subnetworks/burst-subnet"
    res = {
        **build(aws_spec(subnets=("subnet-0a",), security_groups=("sg-0burst",), disk_gb=500)),
        **{
            f"g-{k}": v
            for k, v in build(
                gcp_spec(subnetwork=subnet, network_tags=("slurm-node",), disk_gb=300)
            ).items()
        },
    }

    def check(_: Any) -> None:
        lt = pulumi_mocks.by_type("aws:ec2/launchTemplate:LaunchTemplate")[0].inputs
        assert lt["blockDeviceMappings"][0]["ebs"]["volumeSize"] == 500
        assert lt["networkInterfaces"][0]["securityGroups"] == ["sg-0burst"]
        asg = pulumi_mocks.by_type("aws:autoscaling/group:Group")[0].inputs
        assert asg["vpcZoneIdentifiers"] == ["subnet-0a"]
        tpl = pulumi_mocks.by_type("gcp:compute/instanceTemplate:InstanceTemplate")[0].inputs
        assert tpl["networkInterfaces"][0]["subnetwork"] == subnet
        assert tpl["tags"] == ["slurm-node"]
        assert tpl["disks"][0]["diskSizeGb"] == 300

    return pulumi.Output.all(*(r.urn for r in res.values())).apply(check)
