"""The CrossGuard pack, in-process (PolicyPack itself is never constructed: it starts a gRPC server
and blocks). Each rule gets a passing and a violating resource; the analyzer servicer (what the CLI
talks to) checks enforcement levels and config."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import struct_pb2
from pulumi.runtime.proto import analyzer_pb2
from pulumi_policy import (
    EnforcementLevel,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    StackValidationArgs,
)
from pulumi_policy.policy import _PolicyAnalyzerServicer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "policies" / "policypack"))
from gpu_policies import POLICIES, RESOURCE_TYPES

pytestmark = pytest.mark.pulumi

BY_NAME = {p.name: p for p in POLICIES}
LT = "aws:ec2/launchTemplate:LaunchTemplate"
ASG = "aws:autoscaling/group:Group"
TPL = "gcp:compute/instanceTemplate:InstanceTemplate"
MIG = "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"
TAGS = {"controller": "burst-ctl", "pool": "aws-a100", "team": "vision", "decision": "d-1"}


def good_lt(**over: Any) -> dict[str, Any]:
    props: dict[str, Any] = {
        "instanceType": "p4d.24xlarge",
        "metadataOptions": {"httpTokens": "required"},
        "blockDeviceMappings": [{"deviceName": "/dev/sda1", "ebs": {"encrypted": "true"}}],
        "networkInterfaces": [{"deviceIndex": 0, "associatePublicIpAddress": "false"}],
        "instanceMarketOptions": {"marketType": "spot"},
        "tags": {**TAGS, "workload": "batch"},
        "tagSpecifications": [
            {"resourceType": "instance", "tags": TAGS},
            {"resourceType": "volume", "tags": TAGS},
        ],
    }
    props.update(over)
    return props


def good_asg(**over: Any) -> dict[str, Any]:
    props: dict[str, Any] = {
        "minSize": 0,
        "maxSize": 4,
        "tags": [{"key": k, "value": v, "propagateAtLaunch": True} for k, v in TAGS.items()],
    }
    props.update(over)
    return props


def good_tpl(**over: Any) -> dict[str, Any]:
    props: dict[str, Any] = {
        "machineType": "a2-highgpu-1g",
        "guestAccelerators": [{"type": "nvidia-tesla-a100", "count": 1}],
        "scheduling": {"onHostMaintenance": "TERMINATE", "provisioningModel": "SPOT"},
        "networkInterfaces": [{"network": "global/networks/default"}],
        "disks": [{"boot": True, "sourceImage": "img"}],
        "labels": {**TAGS, "pool": "gcp-a100", "workload": "batch"},
    }
    props.update(over)
    return props


def plain_options() -> PolicyResourceOptions:
    """A resource's options as a plain `pulumi preview` reports them."""
    return PolicyResourceOptions(
        protect=False,
        ignore_changes=[],
        delete_before_replace=None,
        aliases=[],
        additional_secret_outputs=[],
        custom_timeouts=None,
        parent=None,
    )


def run_policy(
    name: str, typ: str, props: dict[str, Any], config: dict[str, Any] | None = None
) -> list[str]:
    """Call one policy's validate function with a hand-built args bag."""
    violations: list[str] = []
    opts = plain_options()
    args = ResourceValidationArgs(
        typ, props, f"urn:pulumi:unit::p::{typ}::x", "x", opts, None, config
    )
    BY_NAME[name].validate(args, lambda msg, urn=None: violations.append(msg))
    return violations


def _servicer(config: dict[str, dict[str, Any]] | None) -> _PolicyAnalyzerServicer:
    svc = _PolicyAnalyzerServicer(
        "gpu-burst-guardrails", "0.1.0", POLICIES, EnforcementLevel.MANDATORY
    )
    if config:
        req = analyzer_pb2.ConfigureAnalyzerRequest()
        for name, cfg in config.items():
            # an unset level would read as ADVISORY (proto default): keep the policy's own
            level = cfg.pop("enforcementLevel", str(BY_NAME[name].enforcement_level.value).upper())
            s = struct_pb2.Struct()
            s.update(cfg)
            req.policyConfig[name].properties.CopyFrom(s)
            req.policyConfig[name].enforcementLevel = analyzer_pb2.EnforcementLevel.Value(level)
        svc.Configure(req, None)
    return svc


def _diags(resp: Any) -> list[tuple[str, str, str]]:
    return [
        (d.policyName, analyzer_pb2.EnforcementLevel.Name(d.enforcementLevel), d.message)
        for d in resp.diagnostics
    ]


def analyze(
    typ: str, props: dict[str, Any], config: dict[str, dict[str, Any]] | None = None
) -> list[tuple[str, str, str]]:
    """Drive the analyzer servicer the CLI talks to over gRPC, in-process: one resource."""
    s = struct_pb2.Struct()
    s.update(props)
    req = analyzer_pb2.AnalyzeRequest(type=typ, properties=s, urn="urn:x", name="x")
    return _diags(_servicer(config).Analyze(req, None))


def analyze_stack(
    resources: list[tuple[str, dict[str, Any]]], config: dict[str, dict[str, Any]] | None = None
) -> list[tuple[str, str, str]]:
    """The servicer's stack call (the rules whose verdict is a pool's)."""
    req = analyzer_pb2.AnalyzeStackRequest()
    for i, (typ, props) in enumerate(resources):
        s = struct_pb2.Struct()
        s.update(props)
        req.resources.append(
            analyzer_pb2.AnalyzerResource(type=typ, properties=s, urn=f"urn:{i}", name=f"r{i}")
        )
    return _diags(_servicer(config).AnalyzeStack(req, None))


CASES = [
    # (policy, type, passing props, violating props)
    ("gpu-instance-types-allowed", LT, good_lt(), good_lt(instanceType="m5.24xlarge")),
    ("gpu-instance-types-allowed", TPL, good_tpl(), good_tpl(machineType="n2-standard-96")),
    ("cost-tags-present", LT, good_lt(), good_lt(tags={"controller": "burst-ctl"})),
    (
        "cost-tags-present",
        LT,
        good_lt(),
        good_lt(tagSpecifications=[{"resourceType": "instance", "tags": {**TAGS, "team": ""}}]),
    ),
    ("cost-tags-present", ASG, good_asg(), good_asg(tags=[])),
    (
        "cost-tags-present",
        ASG,
        good_asg(),
        good_asg(
            tags=[{"key": k, "value": v, "propagateAtLaunch": False} for k, v in TAGS.items()]
        ),
    ),
    ("cost-tags-present", TPL, good_tpl(), good_tpl(labels={"pool": "gcp-a100"})),
    (
        "no-public-ip",
        LT,
        good_lt(),
        good_lt(networkInterfaces=[{"deviceIndex": 0, "associatePublicIpAddress": "true"}]),
    ),
    (
        "no-public-ip",
        TPL,
        good_tpl(),
        good_tpl(networkInterfaces=[{"network": "default", "accessConfigs": [{}]}]),
    ),
    (
        "encrypted-disks",
        LT,
        good_lt(),
        good_lt(blockDeviceMappings=[{"deviceName": "/dev/sda1", "ebs": {"encrypted": "false"}}]),
    ),
    ("encrypted-disks", LT, good_lt(), good_lt(blockDeviceMappings=[])),
    ("imdsv2-required", LT, good_lt(), good_lt(metadataOptions={"httpTokens": "optional"})),
    ("imdsv2-required", LT, good_lt(), good_lt(metadataOptions=None)),
    ("pool-max-size-within-cap", ASG, good_asg(), good_asg(maxSize=64)),
    ("pool-max-size-within-cap", ASG, good_asg(), good_asg(minSize=1)),
    ("pool-max-size-within-cap", MIG, {"targetSize": 2}, {"targetSize": 17}),
    (
        "gpu-terminate-on-host-maintenance",
        TPL,
        good_tpl(),
        good_tpl(scheduling={"onHostMaintenance": "MIGRATE", "provisioningModel": "SPOT"}),
    ),
]


@pytest.mark.parametrize(
    ("policy", "typ", "good", "bad"),
    CASES,
    ids=[f"{c[0]}-{c[1].split(':')[-1]}-{i}" for i, c in enumerate(CASES)],
)
def test_rule_passes_good_and_reports_bad(
    policy: str, typ: str, good: dict[str, Any], bad: dict[str, Any]
) -> None:
    assert run_policy(policy, typ, good) == []
    assert run_policy(policy, typ, bad) != []


def test_every_rule_has_cases() -> None:
    assert {c[0] for c in CASES} | {"batch-pools-use-spot"} == set(BY_NAME)


def test_every_rule_names_the_resource_types_it_reads() -> None:
    """What "not applicable" on a pool is decided from: each rule's types, and each case's type
    among them."""
    assert set(RESOURCE_TYPES) == set(BY_NAME)
    for policy, typ, _good, _bad in CASES:
        assert typ in RESOURCE_TYPES[policy], (policy, typ)


OD_LT = good_lt(instanceMarketOptions=None)
OD_TPL = good_tpl(scheduling={"onHostMaintenance": "TERMINATE", "provisioningModel": "STANDARD"})


def run_stack_policy(
    name: str, resources: list[tuple[str, dict[str, Any]]], config: dict[str, Any] | None = None
) -> list[tuple[str, str | None]]:
    """Call one stack policy's validate function over hand-built resources."""
    violations: list[tuple[str, str | None]] = []
    opts = plain_options()
    stack = [
        PolicyResource(t, props, f"urn:x::{t}::r{i}", f"r{i}", opts, None, None, [], {})
        for i, (t, props) in enumerate(resources)
    ]
    args = StackValidationArgs(stack, config or {}, {})
    BY_NAME[name].validate(args, lambda msg, urn=None: violations.append((msg, urn)))
    return violations


@pytest.mark.parametrize(
    ("typ", "spot", "on_demand"), [(LT, good_lt(), OD_LT), (TPL, good_tpl(), OD_TPL)]
)
def test_a_batch_pool_is_told_to_use_spot_only_when_it_cannot(
    typ: str, spot: dict[str, Any], on_demand: dict[str, Any]
) -> None:
    """The verdict is the pool's: an on-demand group beside a spot one is the fallback of a
    `capacity: any` pool, on purpose; a pool with no spot group at all is reported, once."""
    assert run_stack_policy("batch-pools-use-spot", [(typ, spot)]) == []
    assert run_stack_policy("batch-pools-use-spot", [(typ, on_demand), (typ, spot)]) == []
    found = run_stack_policy("batch-pools-use-spot", [(typ, on_demand), (typ, on_demand)])
    assert len(found) == 1 and "no spot capacity" in found[0][0]
    assert found[0][1] == f"urn:x::{typ}::r0"  # reported on the pool's first template
    exempt = {"onDemandBatchPools": [on_demand["tags" if typ == LT else "labels"]["pool"]]}
    assert run_stack_policy("batch-pools-use-spot", [(typ, on_demand)], exempt) == []
    inference = {**on_demand}
    key = "tags" if typ == LT else "labels"
    inference[key] = {**on_demand[key], "workload": "inference"}
    assert run_stack_policy("batch-pools-use-spot", [(typ, inference)]) == []


def test_allow_list_and_caps_come_from_config() -> None:
    assert run_policy(
        "gpu-instance-types-allowed", LT, good_lt(), {"allowedInstanceTypes": ["g6.*"]}
    )
    assert run_policy(
        "pool-max-size-within-cap", ASG, good_asg(), {"poolMaxNodes": {"aws-a100": 2}}
    )
    assert not run_policy(
        "pool-max-size-within-cap", ASG, good_asg(maxSize=40), {"maxPoolNodes": 64}
    )
    plain = good_tpl()
    assert not run_policy("encrypted-disks", TPL, plain)  # GCE encrypts every disk at rest
    assert run_policy("encrypted-disks", TPL, plain, {"requireCmek": True})
    cmek = good_tpl(disks=[{"boot": True, "diskEncryptionKey": {"kmsKeySelfLink": "k"}}])
    assert not run_policy("encrypted-disks", TPL, cmek, {"requireCmek": True})


def test_servicer_reports_levels_and_applies_config() -> None:
    assert analyze(LT, good_lt()) == []
    assert analyze(TPL, good_tpl()) == []
    diags = analyze(LT, good_lt(metadataOptions={"httpTokens": "optional"}))
    assert [(d[0], d[1]) for d in diags] == [("imdsv2-required", "MANDATORY")]
    assert "IMDSv2" in diags[0][2]
    # spot-for-batch is advisory by default (an admin may choose on-demand on purpose) ...
    diags = analyze_stack([(LT, OD_LT)])
    assert [(d[0], d[1]) for d in diags] == [("batch-pools-use-spot", "ADVISORY")]
    # ... and an admin can make it mandatory
    diags = analyze_stack(
        [(LT, OD_LT)], {"batch-pools-use-spot": {"enforcementLevel": "MANDATORY"}}
    )
    assert [(d[0], d[1]) for d in diags] == [("batch-pools-use-spot", "MANDATORY")]
    assert analyze_stack([(LT, OD_LT), (LT, good_lt())]) == []
    # numbers arrive as floats through the Struct
    diags = analyze(ASG, good_asg(maxSize=20), {"pool-max-size-within-cap": {"maxPoolNodes": 8}})
    assert [(d[0], d[1]) for d in diags] == [("pool-max-size-within-cap", "MANDATORY")]
    assert "exceeds the cap of 8 nodes" in diags[0][2]
