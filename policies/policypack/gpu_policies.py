"""CrossGuard guardrails for GPU burst node groups (the policies; `__main__.py` wraps them).

Kept importable on its own: constructing `PolicyPack` starts a gRPC server and blocks, so tests
call these validate functions (or the analyzer servicer) in-process instead. Property names are the
engine's (camelCase) and numbers may arrive as floats.

Config (all optional, per policy, in the usual CrossGuard policy config file):
  gpu-instance-types-allowed: allowedInstanceTypes  (fnmatch patterns)
  pool-max-size-within-cap:   maxPoolNodes (global cap), poolMaxNodes ({pool: n})
  encrypted-disks:            requireCmek (GCP: a customer-managed key on every disk)
  batch-pools-use-spot:       onDemandBatchPools (batch pools allowed to run on-demand)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

AWS_LT = "aws:ec2/launchTemplate:LaunchTemplate"
AWS_ASG = "aws:autoscaling/group:Group"
GCP_TPL = "gcp:compute/instanceTemplate:InstanceTemplate"
GCP_MIG = "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"

COST_TAGS = ("controller", "pool", "team", "decision")
DEFAULT_ALLOWED = (
    "p4d.*",
    "p4de.*",
    "p5.*",
    "p5e.*",
    "p5en.*",
    "g5.*",
    "g6.*",
    "g6e.*",
    "a2-*",
    "a3-*",
    "g2-*",
    "g4-*",
)
DEFAULT_MAX_POOL_NODES = 16

Validate = Callable[[ResourceValidationArgs, ReportViolation], None]
StackValidate = Callable[[StackValidationArgs, ReportViolation], None]


def _truthy(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


def _config(args: ResourceValidationArgs | StackValidationArgs) -> Mapping[str, Any]:
    return args.get_config() or {}


def _aws_tags(props: Mapping[str, Any]) -> dict[str, str]:
    return dict(props.get("tags") or {})


def _group_tags(props: Mapping[str, Any]) -> dict[str, str]:
    return {t.get("key", ""): t.get("value", "") for t in props.get("tags") or []}


def _labels(props: Mapping[str, Any]) -> dict[str, str]:
    return dict(props.get("labels") or {})


# ----------------------------------------------------------------------------- rules
def instance_types_allowed(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type == AWS_LT:
        itype = args.props.get("instanceType")
    elif args.resource_type == GCP_TPL:
        itype = args.props.get("machineType")
    else:
        return
    allowed = list(_config(args).get("allowedInstanceTypes") or DEFAULT_ALLOWED)
    if not itype or not any(fnmatchcase(str(itype), pat) for pat in allowed):
        report(f"instance type {itype!r} is not in the allow list {allowed}")


def cost_tags_present(args: ResourceValidationArgs, report: ReportViolation) -> None:
    props = args.props
    sets: list[tuple[str, dict[str, str]]]
    if args.resource_type == AWS_LT:
        sets = [("tags", _aws_tags(props))]
        specs = {
            s.get("resourceType"): dict(s.get("tags") or {})
            for s in props.get("tagSpecifications") or []
        }
        sets += [
            (f"tagSpecifications[{kind}]", specs.get(kind, {})) for kind in ("instance", "volume")
        ]
    elif args.resource_type == AWS_ASG:
        sets = [("tags", _group_tags(props))]
        unpropagated = [
            t.get("key")
            for t in props.get("tags") or []
            if t.get("key") in COST_TAGS and not _truthy(t.get("propagateAtLaunch"))
        ]
        if unpropagated:
            report(f"tags {sorted(unpropagated)} must propagate to instances (propagateAtLaunch)")
    elif args.resource_type == GCP_TPL:
        sets = [("labels", _labels(props))]
    else:
        return
    for where, tags in sets:
        missing = [k for k in COST_TAGS if not tags.get(k)]
        if missing:
            report(f"{where} lacks cost-allocation tags {missing}")


def no_public_ip(args: ResourceValidationArgs, report: ReportViolation) -> None:
    props = args.props
    if args.resource_type == AWS_LT:
        for i, nic in enumerate(props.get("networkInterfaces") or []):
            if _truthy(nic.get("associatePublicIpAddress")):
                report(f"networkInterfaces[{i}] associates a public IP address")
    elif args.resource_type == GCP_TPL:
        for i, nic in enumerate(props.get("networkInterfaces") or []):
            if nic.get("accessConfigs") or nic.get("ipv6AccessConfigs"):
                report(f"networkInterfaces[{i}] has an external IP (accessConfigs)")


def encrypted_disks(args: ResourceValidationArgs, report: ReportViolation) -> None:
    props = args.props
    if args.resource_type == AWS_LT:
        mappings = props.get("blockDeviceMappings") or []
        if not mappings:
            report("no blockDeviceMappings: the root volume's encryption is left to the AMI")
        for i, m in enumerate(mappings):
            ebs = m.get("ebs") or {}
            if ebs and not _truthy(ebs.get("encrypted")):
                report(f"blockDeviceMappings[{i}] ({m.get('deviceName')}) is not encrypted")
    elif args.resource_type == GCP_TPL and _truthy(_config(args).get("requireCmek")):
        # Persistent disks are always encrypted at rest by Google; CMEK is an opt-in stricter rule.
        for i, disk in enumerate(props.get("disks") or []):
            if not disk.get("diskEncryptionKey"):
                report(f"disks[{i}] has no customer-managed encryption key")


def imdsv2_required(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != AWS_LT:
        return
    tokens = (args.props.get("metadataOptions") or {}).get("httpTokens")
    if tokens != "required":
        report(f"metadataOptions.httpTokens must be 'required' (IMDSv2), got {tokens!r}")


def pool_max_within_cap(args: ResourceValidationArgs, report: ReportViolation) -> None:
    props = args.props
    cfg = _config(args)
    cap = float(cfg.get("maxPoolNodes") or DEFAULT_MAX_POOL_NODES)
    if args.resource_type == AWS_ASG:
        pool = _group_tags(props).get("pool", "")
        per_pool = dict(cfg.get("poolMaxNodes") or {})
        if pool in per_pool:
            cap = min(cap, float(per_pool[pool]))
        size = float(props.get("maxSize") or 0)
        if float(props.get("minSize") or 0) != 0:
            report(f"burst groups scale from zero: minSize is {props.get('minSize')}")
        if size > cap:
            report(f"maxSize {size:g} exceeds the cap of {cap:g} nodes")
    elif args.resource_type == GCP_MIG:
        size = float(props.get("targetSize") or 0)
        if size > cap:
            report(f"targetSize {size:g} exceeds the cap of {cap:g} nodes")


def batch_pools_use_spot(args: StackValidationArgs, report: ReportViolation) -> None:
    """A stack rule, because the verdict is the pool's: a batch pool with `capacity: any` has an
    on-demand group on purpose, as the fallback beside its spot groups. It is told to use spot
    only when none of its groups can (once, on its first template)."""
    exempt = set(_config(args).get("onDemandBatchPools") or [])
    spot: dict[str, bool] = {}
    first: dict[str, str] = {}
    for r in args.resources:
        props = r.props
        if r.resource_type == AWS_LT:
            tags = _aws_tags(props)
            is_spot = (props.get("instanceMarketOptions") or {}).get("marketType") == "spot"
        elif r.resource_type == GCP_TPL:
            tags = _labels(props)
            is_spot = (props.get("scheduling") or {}).get("provisioningModel") == "SPOT"
        else:
            continue
        pool = tags.get("pool", "")
        if tags.get("workload") != "batch" or pool in exempt:
            continue
        spot[pool] = spot.get(pool, False) or is_spot
        first.setdefault(pool, r.urn)
    for pool in sorted(p for p, any_spot in spot.items() if not any_spot):
        report(
            f"pool {pool!r} is a batch pool with no spot capacity (capacity: on-demand)",
            first[pool],
        )


def gpus_terminate_on_maintenance(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != GCP_TPL or not args.props.get("guestAccelerators"):
        return
    if (args.props.get("scheduling") or {}).get("onHostMaintenance") != "TERMINATE":
        report("GPU VMs cannot live-migrate: scheduling.onHostMaintenance must be TERMINATE")


# The resource types each rule reads: on a pool with none of them (an AWS rule on a GCP pool)
# the review says "not applicable", never "pass".
RESOURCE_TYPES: dict[str, tuple[str, ...]] = {
    "gpu-instance-types-allowed": (AWS_LT, GCP_TPL),
    "cost-tags-present": (AWS_LT, AWS_ASG, GCP_TPL),
    "no-public-ip": (AWS_LT, GCP_TPL),
    "encrypted-disks": (AWS_LT, GCP_TPL),
    "imdsv2-required": (AWS_LT,),
    "pool-max-size-within-cap": (AWS_ASG, GCP_MIG),
    "batch-pools-use-spot": (AWS_LT, GCP_TPL),
    "gpu-terminate-on-host-maintenance": (GCP_TPL,),
}


def _policy(
    name: str,
    description: str,
    validate: Validate,
    level: EnforcementLevel = EnforcementLevel.MANDATORY,
    config: dict[str, Any] | None = None,
) -> ResourceValidationPolicy:
    return ResourceValidationPolicy(
        name=name,
        description=description,
        validate=validate,
        enforcement_level=level,
        config_schema=PolicyConfigSchema(properties=config) if config else None,
    )


POLICIES = [
    _policy(
        "gpu-instance-types-allowed",
        "Only approved GPU instance types.",
        instance_types_allowed,
        config={"allowedInstanceTypes": {"type": "array", "items": {"type": "string"}}},
    ),
    _policy(
        "cost-tags-present",
        "Every burst resource carries controller, pool, team and decision tags/labels.",
        cost_tags_present,
    ),
    _policy("no-public-ip", "Burst nodes get no public IP address.", no_public_ip),
    _policy(
        "encrypted-disks",
        "Node disks are encrypted.",
        encrypted_disks,
        config={"requireCmek": {"type": "boolean"}},
    ),
    _policy("imdsv2-required", "EC2 instance metadata requires IMDSv2 tokens.", imdsv2_required),
    _policy(
        "pool-max-size-within-cap",
        "Burst groups scale from zero and stay within the node cap.",
        pool_max_within_cap,
        config={"maxPoolNodes": {"type": "number"}, "poolMaxNodes": {"type": "object"}},
    ),
    # Advisory by default: an admin may choose on-demand for a batch pool on purpose.
    StackValidationPolicy(
        name="batch-pools-use-spot",
        description="Batch pools can run on spot capacity.",
        validate=batch_pools_use_spot,
        enforcement_level=EnforcementLevel.ADVISORY,
        config_schema=PolicyConfigSchema(
            properties={"onDemandBatchPools": {"type": "array", "items": {"type": "string"}}}
        ),
    ),
    _policy(
        "gpu-terminate-on-host-maintenance",
        "GCE GPU instances terminate on host maintenance.",
        gpus_terminate_on_maintenance,
    ),
]
