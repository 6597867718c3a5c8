"""Pulumi program for one burst node group (a `PoolSpec`): the IaC twin of the SDK drivers.

AWS: launch template (IMDSv2 required, encrypted root volume, no public IP, tags on the template,
instances and volumes) + auto scaling group (min 0, max from policy). GCP: instance template (guest
accelerators, TERMINATE on host maintenance, SPOT or STANDARD, labels, no external IP) + regional
managed instance group. Physical names equal the SDK driver's, so `CloudCapacity` finds the group
whichever driver created it. The run-time size belongs to the controller: the program ignores
`desiredCapacity` / `targetSize` so Pulumi and the controller never fight.

`build_pool(spec)` is pure apart from declaring resources: `infra/__main__.py` calls it for a
`pulumi preview` by hand, the Pulumi driver runs it inline, IaC reviews render pools through it.
"""

from __future__ import annotations

import base64
from typing import Any

import pulumi

from provisioner.act.ports import TAG_SHAPE, PoolSpec, safe_name
from provisioner.act.shapes import (
    GCP_SCOPES,
    SUSPENDED_PROCESSES,
    aws_instance_profile,
    aws_instance_tags,
    gcp_accelerator_type,
    gcp_template_name,
    gcp_zone_name,
    pool_description,
)

# The controller owns the size at run time; the program declares only min/max and the shape.
IGNORE_SIZE = {"aws": ["desiredCapacity"], "gcp": ["targetSize"]}


def aws_pool(spec: PoolSpec) -> dict[str, pulumi.CustomResource]:
    import pulumi_aws as aws

    name = spec.group_name
    instance_tags = aws_instance_tags(spec)
    market = None
    if spec.spot:
        market = aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(
            market_type="spot",
            spot_options=aws.ec2.LaunchTemplateInstanceMarketOptionsSpotOptionsArgs(
                spot_instance_type="one-time",
                instance_interruption_behavior="terminate",
            ),
        )
    lt = aws.ec2.LaunchTemplate(
        f"{name}-lt",
        name=name,
        region=spec.region,
        image_id=spec.image,
        instance_type=spec.instance_type,
        user_data=base64.b64encode(spec.user_data.encode()).decode() if spec.user_data else None,
        update_default_version=True,
        metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
            http_tokens="required",
            http_endpoint="enabled",
            http_put_response_hop_limit=2,
            instance_metadata_tags="enabled",
        ),
        block_device_mappings=[
            aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name=spec.root_device,
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    encrypted="true",
                    volume_size=spec.disk_gb,
                    volume_type="gp3",
                    delete_on_termination="true",
                ),
            )
        ],
        network_interfaces=[
            aws.ec2.LaunchTemplateNetworkInterfaceArgs(
                device_index=0,
                associate_public_ip_address="false",
                delete_on_termination="true",
                security_groups=list(spec.security_groups) or None,
            )
        ],
        instance_market_options=market,
        iam_instance_profile=aws.ec2.LaunchTemplateIamInstanceProfileArgs(
            **{k.lower(): v for k, v in aws_instance_profile(spec.instance_profile).items()}
        )
        if spec.instance_profile
        else None,
        tag_specifications=[
            aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=instance_tags)
            for kind in ("instance", "volume")
        ],
        tags={**spec.tags, TAG_SHAPE: spec.shape_hash},
    )
    placement: dict[str, Any] = (
        {"vpc_zone_identifiers": list(spec.subnets)}
        if spec.subnets
        else {"availability_zones": list(spec.zones) or [f"{spec.region}a"]}
    )
    asg = aws.autoscaling.Group(
        f"{name}-asg",
        name=name,
        region=spec.region,
        min_size=0,
        max_size=spec.max_size,
        launch_template=aws.autoscaling.GroupLaunchTemplateArgs(id=lt.id, version="$Default"),
        capacity_rebalance=False,  # the controller acts on rebalance warnings itself
        suspended_processes=sorted(SUSPENDED_PROCESSES),
        # a resize below the members ends none; ending one by name is unaffected
        protect_from_scale_in=True,
        tags=[
            aws.autoscaling.GroupTagArgs(key=k, value=v, propagate_at_launch=True)
            for k, v in sorted(spec.tags.items())
        ],
        opts=pulumi.ResourceOptions(ignore_changes=IGNORE_SIZE["aws"]),
        **placement,
    )
    return {"launch_template": lt, "group": asg}


def gcp_pool(spec: PoolSpec) -> dict[str, pulumi.CustomResource]:
    import pulumi_gcp as gcp

    name = spec.group_name
    project = spec.project or None
    tpl = gcp.compute.InstanceTemplate(
        f"{name}-tpl",
        name=gcp_template_name(spec),
        project=project,
        description=pool_description(spec),
        machine_type=spec.instance_type,
        guest_accelerators=[
            gcp.compute.InstanceTemplateGuestAcceleratorArgs(
                type=gcp_accelerator_type(spec.instance_type, spec.gpu_model), count=spec.gpus
            )
        ],
        scheduling=gcp.compute.InstanceTemplateSchedulingArgs(
            on_host_maintenance="TERMINATE",
            automatic_restart=False,
            provisioning_model="SPOT" if spec.spot else "STANDARD",
            preemptible=spec.spot,
            instance_termination_action="DELETE" if spec.spot else None,
        ),
        disks=[
            gcp.compute.InstanceTemplateDiskArgs(
                source_image=spec.image,
                boot=True,
                auto_delete=True,
                disk_size_gb=spec.disk_gb,
                disk_type="pd-balanced",
            )
        ],
        # no access_configs: no external IP
        network_interfaces=[
            gcp.compute.InstanceTemplateNetworkInterfaceArgs(
                network=spec.network, subnetwork=spec.subnetwork or None
            )
        ],
        tags=list(spec.network_tags) or None,
        labels=dict(spec.tags),
        metadata={"user-data": spec.user_data} if spec.user_data else None,
        service_account=gcp.compute.InstanceTemplateServiceAccountArgs(
            email=spec.service_account, scopes=list(GCP_SCOPES)
        )
        if spec.service_account
        else None,
    )
    zones = [gcp_zone_name(z) for z in spec.zones]
    mig = gcp.compute.RegionInstanceGroupManager(
        f"{name}-mig",
        name=name,
        project=project,
        region=spec.region,
        base_instance_name=safe_name(name, 54),
        description=pool_description(spec),
        versions=[
            gcp.compute.RegionInstanceGroupManagerVersionArgs(
                name="primary", instance_template=tpl.self_link_unique
            )
        ],
        target_size=0,
        distribution_policy_zones=zones or None,
        distribution_policy_target_shape="ANY",
        update_policy=gcp.compute.RegionInstanceGroupManagerUpdatePolicyArgs(
            type="OPPORTUNISTIC",
            minimal_action="REPLACE",
            instance_redistribution_type="NONE",
            max_surge_fixed=0,
            max_unavailable_fixed=max(len(zones), 3),
        ),
        wait_for_instances=False,
        opts=pulumi.ResourceOptions(ignore_changes=IGNORE_SIZE["gcp"]),
    )
    return {"instance_template": tpl, "group": mig}


def build_pool(spec: PoolSpec, *, export: bool = True) -> dict[str, pulumi.CustomResource]:
    """Declare the resources of one node group and return them by role."""
    resources = aws_pool(spec) if spec.cloud == "aws" else gcp_pool(spec)
    if export:
        pulumi.export(f"{spec.group_name}.group", resources["group"].name)  # type: ignore[attr-defined]
    return resources
