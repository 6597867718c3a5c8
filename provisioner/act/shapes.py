"""The node shape of a pool spec, as plain API data (no SDK imports).

The SDK adapters send exactly these bodies; the Pulumi program in `infra/` declares the same
settings. Guardrails that hold on every path: IMDSv2 required, encrypted root volume, no public IP,
every resource tagged, GPUs on GCE terminate on host maintenance.
"""

from __future__ import annotations

import base64
from typing import Any

from provisioner.act.ports import PoolSpec, safe_name
from provisioner.domain.errors import InvalidArgument

# Auto Scaling processes that would end a running member or add one nobody asked for:
# AZRebalance (evens out zones by terminating members) and ReplaceUnhealthy (replaces a member
# that failed a health check). Launch and Terminate stay: resizes and named terminations need them.
SUSPENDED_PROCESSES = frozenset({"AZRebalance", "ReplaceUnhealthy"})

# GCE accelerator type per machine family (the accelerator-optimised families carry their GPUs).
_GCP_ACCELERATORS: tuple[tuple[str, str], ...] = (
    ("a2-ultragpu-", "nvidia-a100-80gb"),
    ("a2-highgpu-", "nvidia-tesla-a100"),
    ("a2-megagpu-", "nvidia-tesla-a100"),
    ("a3-megagpu-", "nvidia-h100-mega-80gb"),
    ("a3-highgpu-", "nvidia-h100-80gb"),
    ("a3-edgegpu-", "nvidia-h100-80gb"),
    ("a3-ultragpu-", "nvidia-h200-141gb"),
    ("g2-", "nvidia-l4"),
    ("g4-", "nvidia-rtx-pro-6000"),
)
_GCP_BY_MODEL = {
    "a100": "nvidia-tesla-a100",
    "a100-80gb": "nvidia-a100-80gb",
    "h100": "nvidia-h100-80gb",
    "h200": "nvidia-h200-141gb",
    "l4": "nvidia-l4",
    "t4": "nvidia-tesla-t4",
    "v100": "nvidia-tesla-v100",
    "p100": "nvidia-tesla-p100",
    "p4": "nvidia-tesla-p4",
}


def gcp_accelerator_type(machine_type: str, gpu_model: str) -> str:
    for prefix, accel in _GCP_ACCELERATORS:
        if machine_type.startswith(prefix):
            return accel
    key = gpu_model.lower().replace(" ", "-")
    if key in _GCP_BY_MODEL:
        return _GCP_BY_MODEL[key]
    raise InvalidArgument(f"no GCE accelerator type known for {machine_type} / {gpu_model}")


def aws_tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]


def aws_instance_tags(spec: PoolSpec) -> dict[str, str]:
    return {**spec.tags, "Name": spec.group_name}


def aws_instance_profile(profile: str) -> dict[str, str]:
    """An instance profile given by ARN or by name, as the launch template takes it."""
    return {"Arn": profile} if profile.startswith("arn:") else {"Name": profile}


# What a VM's service account may use; IAM roles on the account, not scopes, limit it (Google's
# advice for service accounts: https://cloud.google.com/compute/docs/access/service-accounts).
GCP_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)


def aws_launch_template_data(spec: PoolSpec) -> dict[str, Any]:
    """LaunchTemplateData for create_launch_template(_version)."""
    tags = aws_tag_list(aws_instance_tags(spec))
    nic: dict[str, Any] = {
        "DeviceIndex": 0,
        "AssociatePublicIpAddress": False,
        "DeleteOnTermination": True,
    }
    if spec.security_groups:
        nic["Groups"] = list(spec.security_groups)
    data: dict[str, Any] = {
        "ImageId": spec.image,
        "InstanceType": spec.instance_type,
        "MetadataOptions": {
            "HttpTokens": "required",
            "HttpEndpoint": "enabled",
            "HttpPutResponseHopLimit": 2,
            # the instance reads its own tags (the slurm-node it was bound to) from IMDS
            "InstanceMetadataTags": "enabled",
        },
        "BlockDeviceMappings": [
            {
                "DeviceName": spec.root_device,
                "Ebs": {
                    "Encrypted": True,
                    "VolumeSize": spec.disk_gb,
                    "VolumeType": "gp3",
                    "DeleteOnTermination": True,
                },
            }
        ],
        "NetworkInterfaces": [nic],
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": tags},
        ],
    }
    if spec.user_data:
        data["UserData"] = base64.b64encode(spec.user_data.encode()).decode()
    if spec.instance_profile:
        data["IamInstanceProfile"] = aws_instance_profile(spec.instance_profile)
    if spec.spot:
        data["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            },
        }
    return data


def aws_group_tags(spec: PoolSpec) -> list[dict[str, Any]]:
    return [
        {
            "ResourceId": spec.group_name,
            "ResourceType": "auto-scaling-group",
            "Key": k,
            "Value": v,
            "PropagateAtLaunch": True,
        }
        for k, v in sorted(spec.tags.items())
    ]


def pool_description(spec: PoolSpec) -> str:
    return f"GPU burst pool {spec.pool} ({spec.offer})"


def gcp_template_name(spec: PoolSpec) -> str:
    """Instance templates are immutable: a new shape gets a new template name."""
    return safe_name(f"{spec.group_name[:50]}-{spec.shape_hash[:8]}")


def gcp_zone_name(zone: str) -> str:
    return zone.rsplit("/", 1)[-1]


def gcp_template_body(spec: PoolSpec) -> dict[str, Any]:
    """An InstanceTemplate resource (REST field names)."""
    scheduling: dict[str, Any] = {
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": False,
        "provisioningModel": "SPOT" if spec.spot else "STANDARD",
    }
    if spec.spot:
        scheduling["instanceTerminationAction"] = "DELETE"
    props: dict[str, Any] = {
        "machineType": spec.instance_type,
        "guestAccelerators": [
            {
                "acceleratorType": gcp_accelerator_type(spec.instance_type, spec.gpu_model),
                "acceleratorCount": spec.gpus,
            }
        ],
        "scheduling": scheduling,
        "disks": [
            {
                "boot": True,
                "autoDelete": True,
                "type": "PERSISTENT",
                "initializeParams": {
                    "sourceImage": spec.image,
                    "diskSizeGb": spec.disk_gb,
                    "diskType": "pd-balanced",
                },
            }
        ],
        # no accessConfigs: no external IP
        "networkInterfaces": [gcp_network_interface(spec)],
        "labels": dict(spec.tags),
        "metadata": {"items": [{"key": "user-data", "value": spec.user_data}]}
        if spec.user_data
        else {},
    }
    if spec.service_account:
        props["serviceAccounts"] = [{"email": spec.service_account, "scopes": list(GCP_SCOPES)}]
    if spec.network_tags:
        props["tags"] = {"items": list(spec.network_tags)}
    return {
        "name": gcp_template_name(spec),
        "description": pool_description(spec),
        "properties": props,
    }


def gcp_network_interface(spec: PoolSpec) -> dict[str, str]:
    """The VM's one interface: the pool's network, and its subnetwork where it names one."""
    nic = {"network": spec.network}
    if spec.subnetwork:
        nic["subnetwork"] = spec.subnetwork
    return nic


def gcp_group_body(spec: PoolSpec, template_link: str) -> dict[str, Any]:
    """A regional InstanceGroupManager resource (REST field names). Starts at size 0."""
    body: dict[str, Any] = {
        "name": spec.group_name,
        "baseInstanceName": safe_name(spec.group_name, 54),
        "instanceTemplate": template_link,
        "targetSize": 0,
        "description": pool_description(spec),
        # GPUs are scarce per zone: let the group place instances wherever there is capacity.
        "distributionPolicy": {"targetShape": "ANY"},
        "updatePolicy": {"type": "OPPORTUNISTIC", "instanceRedistributionType": "NONE"},
    }
    if spec.zones:
        body["distributionPolicy"]["zones"] = [
            {"zone": f"zones/{gcp_zone_name(z)}"} for z in spec.zones
        ]
    return body
