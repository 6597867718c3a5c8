"""The cloud-independent parts of act/: names and tags, error mapping, the retry policy, back-off,
the sweep, specs from the policy, node bootstrap. No network."""

from __future__ import annotations

import base64
import gzip
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from cloud_helpers import CONTROLLER, aws_spec, gcp_spec
from tenacity import stop_after_attempt, wait_none

from provisioner.act.aws import map_client_error
from provisioner.act.backoff_feed import BackoffSettings, record_error, record_success
from provisioner.act.ports import COST_TAGS, CloudState, OwnedInstance, request_token, safe_name
from provisioner.act.retry import cloud_retrying
from provisioner.act.shapes import (
    aws_launch_template_data,
    gcp_accelerator_type,
    gcp_group_body,
    gcp_template_body,
)
from provisioner.act.specs import NodeImages, pool_specs, spec_for_offer
from provisioner.act.sweep import SweepReason, plan_sweep
from provisioner.act.userdata import NodeBootstrap, render_user_data
from provisioner.config.models import Policy, PoolPolicy
from provisioner.domain.errors import (
    AuthError,
    CapacityError,
    CloudError,
    NotFoundError,
    QuotaError,
    ThrottlingError,
    TransientError,
)
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.offers import CapacityType, Offer
from provisioner.plan.backoff import Backoff

REPO_ROOT = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0


# ----------------------------------------------------------------------------- names, tags
def test_group_names_are_stable_valid_and_short() -> None:
    spec = aws_spec()
    assert spec.group_name == "burst-ctl-aws-a100-us-east-1-p4d-24xlarge-spot"
    assert aws_spec(decision_id="d-other", max_size=9).group_name == spec.group_name
    long = safe_name("x" * 80 + ".Y")
    assert len(long) <= 63 and long[0].isalpha() and long == safe_name("x" * 80 + ".Y")
    assert safe_name("9lives") == "g-9lives"


def test_every_resource_tag_set_has_the_cost_tags() -> None:
    tags = aws_spec(team="").tags
    assert all(tags[k] for k in COST_TAGS)
    assert tags["team"] == "unassigned"
    assert gcp_spec(team="Vision Team").tags["team"] == "vision-team"  # a valid GCP label


def test_shape_hash_ignores_decision_and_size() -> None:
    assert aws_spec(decision_id="d-x", max_size=8).shape_hash == aws_spec().shape_hash
    assert aws_spec(image="ami-other").shape_hash != aws_spec().shape_hash


def test_request_tokens_are_deterministic_uuids() -> None:
    token = request_token("d-1", "group", "resize", 3)
    assert uuid.UUID(token) and token == request_token("d-1", "group", "resize", 3)
    assert token != request_token("d-1", "group", "resize", 4)


def test_launch_template_data_guardrails() -> None:
    data = aws_launch_template_data(aws_spec(capacity=CapacityType.ON_DEMAND))
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["BlockDeviceMappings"][0]["Ebs"]["Encrypted"] is True
    assert data["NetworkInterfaces"][0]["AssociatePublicIpAddress"] is False
    assert "InstanceMarketOptions" not in data
    assert "IamInstanceProfile" not in data  # none asked for: the account's default (none)


def test_a_pools_vm_identity_is_in_its_launch_template_and_instance_template() -> None:
    by_name = aws_launch_template_data(aws_spec(instance_profile="burst-node"))
    assert by_name["IamInstanceProfile"] == {"Name": "burst-node"}
    arn = "arn:aws:iam::123456789012:instance-profile/burst-node"
    assert aws_launch_template_data(aws_spec(instance_profile=arn))["IamInstanceProfile"] == {
        "Arn": arn
    }
    sa = "burst-node@burst-proj.iam.gserviceaccount.com"
    props = gcp_template_body(gcp_spec(service_account=sa))["properties"]
    assert props["serviceAccounts"] == [
        {"email": sa, "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}
    ]
    assert "serviceAccounts" not in gcp_template_body(gcp_spec())["properties"]
    # a new identity is a new node shape (a new launch template version, a new template)
    assert aws_spec(instance_profile="a").shape_hash != aws_spec(instance_profile="b").shape_hash


def test_gcp_accelerators_and_group_body() -> None:
    assert gcp_accelerator_type("a2-ultragpu-8g", "A100") == "nvidia-a100-80gb"
    assert gcp_accelerator_type("g2-standard-8", "L4") == "nvidia-l4"
    assert gcp_accelerator_type("n1-standard-8", "T4") == "nvidia-tesla-t4"
    with pytest.raises(ValueError):
        gcp_accelerator_type("n2-standard-8", "Z9")
    body = gcp_group_body(gcp_spec(zones=()), "projects/p/global/instanceTemplates/t")
    assert body["targetSize"] == 0 and "zones" not in body["distributionPolicy"]


# ----------------------------------------------------------------------------- error taxonomy
@pytest.mark.parametrize(
    ("code", "status", "cls"),
    [
        ("InsufficientInstanceCapacity", 500, CapacityError),
        ("SpotMaxPriceTooLow", 400, CapacityError),
        ("VcpuLimitExceeded", 400, QuotaError),
        ("MaxSpotInstanceCountExceeded", 400, QuotaError),
        ("LimitExceeded", 400, QuotaError),
        ("RequestLimitExceeded", 503, ThrottlingError),
        ("Throttling", 400, ThrottlingError),
        ("ResourceContention", 500, ThrottlingError),
        ("UnauthorizedOperation", 403, AuthError),
        ("InvalidClientTokenId", 403, AuthError),
        ("InvalidInstanceID.NotFound", 400, NotFoundError),
        ("InvalidLaunchTemplateName.NotFoundException", 400, NotFoundError),
        ("InternalError", 500, TransientError),
        ("SomethingNew", 502, TransientError),
        ("ValidationError", 400, CloudError),
    ],
)
def test_aws_codes_map_to_the_taxonomy(code: str, status: int, cls: type[CloudError]) -> None:
    err = map_client_error(code, status, "whatever the message says", "aws/r/t/spot")
    assert type(err) is cls and err.code == code and err.offer == "aws/r/t/spot"


def test_aws_mapping_never_reads_the_message() -> None:
    err = map_client_error("ValidationError", 400, "InsufficientInstanceCapacity in us-east-1a")
    assert type(err) is CloudError


def test_botocore_exceptions_are_mapped() -> None:
    from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

    from provisioner.act.aws import map_aws_error

    ice = ClientError(
        {
            "Error": {"Code": "InsufficientInstanceCapacity", "Message": "no"},
            "ResponseMetadata": {"HTTPStatusCode": 500},
        },
        "RunInstances",
    )
    assert isinstance(map_aws_error(ice), CapacityError)
    assert isinstance(map_aws_error(EndpointConnectionError(endpoint_url="x")), TransientError)
    assert isinstance(map_aws_error(NoCredentialsError()), AuthError)


def _gexc(cls_name: str, reason: str = "", *, errors: Any = None) -> Exception:
    from google.api_core import exceptions as gexc

    cls = getattr(gexc, cls_name)
    return cls("message text", errors=errors if errors is not None else [{"reason": reason}])


@pytest.mark.parametrize(
    ("exc", "cls"),
    [
        (("Forbidden", "quotaExceeded"), QuotaError),
        (("Forbidden", "rateLimitExceeded"), ThrottlingError),
        (("Forbidden", "forbidden"), AuthError),
        (("Unauthorized", ""), AuthError),
        (("TooManyRequests", ""), ThrottlingError),
        (("ServiceUnavailable", "ZONE_RESOURCE_POOL_EXHAUSTED"), CapacityError),
        (("ServiceUnavailable", "backendError"), TransientError),
        (("InternalServerError", ""), TransientError),
        (("NotFound", "notFound"), NotFoundError),
        (("BadRequest", "invalid"), CloudError),
    ],
)
def test_gcp_errors_map_to_the_taxonomy(exc: tuple[str, str], cls: type[CloudError]) -> None:
    from provisioner.act.gcp import map_gcp_error

    assert type(map_gcp_error(_gexc(*exc))) is cls


def test_gcp_operation_errors_and_connection_errors() -> None:
    import requests
    from google.cloud import compute_v1

    from provisioner.act.gcp import map_gcp_error, operation_error

    op = compute_v1.Operation(
        status=compute_v1.Operation.Status.DONE,
        http_error_status_code=403,
        error=compute_v1.Error(errors=[compute_v1.Errors(code="QUOTA_EXCEEDED", message="m")]),
    )
    assert isinstance(operation_error(op), QuotaError)
    # an error list without an HTTP status still counts (google-api-core would drop it)
    op = compute_v1.Operation(
        status=compute_v1.Operation.Status.DONE,
        error=compute_v1.Error(
            errors=[compute_v1.Errors(code="ZONE_RESOURCE_POOL_EXHAUSTED", message="m")]
        ),
    )
    assert isinstance(operation_error(op), CapacityError)
    assert operation_error(compute_v1.Operation(status=compute_v1.Operation.Status.DONE)) is None
    assert isinstance(map_gcp_error(requests.ConnectionError("down")), TransientError)


# ----------------------------------------------------------------------------- retry, back-off
def test_retry_policy_retries_only_retryable_errors() -> None:
    def flaky(errors: list[Exception]) -> Any:
        calls: list[int] = []

        def fn() -> str:
            calls.append(1)
            if errors:
                raise errors.pop(0)
            return "ok"

        return fn, calls

    policy = cloud_retrying(wait=wait_none(), stop=stop_after_attempt(3))
    fn, calls = flaky([ThrottlingError("t"), TransientError("x")])
    assert policy(fn) == "ok" and len(calls) == 3
    for err in (CapacityError("c"), QuotaError("q"), AuthError("a"), NotFoundError("n")):
        fn, calls = flaky([err])
        with pytest.raises(type(err)):
            policy(fn)
        assert len(calls) == 1
    fn, calls = flaky([TransientError("x")] * 5)
    with pytest.raises(TransientError):
        policy(fn)
    assert len(calls) == 3


def test_default_policy_waits_with_backoff_through_an_injected_sleep() -> None:
    slept: list[float] = []
    policy = cloud_retrying(sleep=slept.append, stop=stop_after_attempt(3))
    errors = [ThrottlingError("t"), ThrottlingError("t")]

    def fn() -> str:
        if errors:
            raise errors.pop(0)
        return "ok"

    assert policy(fn) == "ok"
    assert len(slept) == 2 and all(0 < s <= 30 for s in slept)


def test_capacity_and_quota_errors_back_the_offer_off() -> None:
    key = aws_spec().offer
    settings = BackoffSettings(initial_s=100, max_s=350)
    b = record_error(Backoff(), key, CapacityError("c", code="ICE"), NOW, settings)
    assert b.blocked(key, NOW + 99) and not b.blocked(key, NOW + 100)
    b = record_error(b, key, QuotaError("q"), NOW + 100, settings)
    assert b.until(key) == NOW + 300  # doubled
    b = record_error(b, key, CapacityError("c"), NOW + 300, settings)
    assert b.until(key) == NOW + 650  # capped at max_s
    for err in (ThrottlingError("t"), TransientError("x"), AuthError("a")):
        assert record_error(Backoff(), key, err, NOW, settings) == Backoff()
    assert not record_success(b, key).blocked(key, NOW)
    assert BackoffSettings.from_guardrails(Policy().guardrails) == BackoffSettings(300.0, 3600.0)


# ----------------------------------------------------------------------------- sweep
def _owned(iid: str, launched: float, state: CloudState = CloudState.RUNNING, **tags: str) -> Any:
    return OwnedInstance(
        iid,
        "aws",
        "us-east-1",
        "us-east-1a",
        "p4d.24xlarge",
        state,
        launched,
        tags={"controller": CONTROLLER} | tags,
    )


def _rec(iid: str, state: InstanceState, since: float) -> CloudInstance:
    inst = CloudInstance(
        iid, "aws-a100", aws_spec().offer, "A100", 8, Decimal("1"), InstanceState.REQUESTED, since
    )
    if state is InstanceState.REQUESTED:
        return inst
    path = {
        InstanceState.READY: [InstanceState.ALLOCATED, InstanceState.READY],
        InstanceState.TERMINATED: [InstanceState.TERMINATED],
        InstanceState.JOINING: [InstanceState.ALLOCATED, InstanceState.JOINING],
    }[state]
    for s in path:
        inst = inst.transition(s, since, "test")
    return inst


def test_sweep_decisions() -> None:
    owned = [
        _owned("i-orphan-old", NOW - 1000),
        _owned("i-orphan-new", NOW - 10),
        _owned("i-ready", NOW - 5000),
        _owned("i-closed", NOW - 5000),
        _owned("i-stuck", NOW - 5000),
        _owned("i-leaving", NOW - 5000, CloudState.STOPPING),
        _owned("i-foreign", 0.0, controller="someone-else"),
    ]
    records = [
        _rec("i-ready", InstanceState.READY, NOW - 4000),
        _rec("i-closed", InstanceState.TERMINATED, NOW - 4000),
        _rec("i-stuck", InstanceState.JOINING, NOW - 4000),  # JOINING times out after 600 s
        _rec("i-leaving", InstanceState.READY, NOW - 4000),
        _rec("i-vanished", InstanceState.READY, NOW - 4000),
        _rec("i-just-gone", InstanceState.READY, NOW - 5),
        _rec("", InstanceState.REQUESTED, NOW - 4000),
    ]
    # the grace counts from when the controller first listed each one (here: since its launch)
    seen = {o.instance_id: o.launched_ts for o in owned}
    plan = plan_sweep(
        owned, records, controller=CONTROLLER, now_ts=NOW, grace_s=600, first_seen=seen
    )
    assert [(t.instance.instance_id, t.reason) for t in plan.terminate] == [
        ("i-closed", SweepReason.RECORD_CLOSED),
        ("i-orphan-old", SweepReason.ORPHAN),
        ("i-stuck", SweepReason.LEASE_EXPIRED),
    ]
    assert [(c.instance_id, c.reason) for c in plan.close] == [
        ("i-vanished", SweepReason.INSTANCE_GONE)
    ]
    partial = plan_sweep(
        owned,
        records,
        controller=CONTROLLER,
        now_ts=NOW,
        grace_s=600,
        listing_complete=False,
        first_seen=seen,
    )
    assert partial.close == () and partial.terminate == plan.terminate


# ----------------------------------------------------------------------------- specs, bootstrap
def _policy() -> Policy:
    return Policy(
        controller="burst-ctl",
        pools=[
            PoolPolicy(
                name="aws-a100",
                cloud="aws",
                regions=["us-east-1", "us-west-2"],
                gpu_model="A100",
                instance_types=["p4d.24xlarge"],
                capacity="any",
                max_nodes=4,
                team="vision",
            ),
            PoolPolicy(
                name="gcp-l4",
                cloud="gcp",
                regions=["us-central1"],
                gpu_model="L4",
                capacity="spot",
                max_nodes=2,
                workload="inference",
            ),
        ],
    )


def _offer(cloud: str, region: str, itype: str, model: str, gpus: float) -> Offer:
    return Offer(cloud, region, itype, model, gpus, 40.0, 96, 1152.0, Decimal("32"), Decimal("10"))


OFFERS = [
    _offer("aws", "us-east-1", "p4d.24xlarge", "A100", 8),
    _offer("aws", "us-west-2", "p4d.24xlarge", "A100", 8),
    _offer("aws", "eu-west-1", "p4d.24xlarge", "A100", 8),
    _offer("aws", "us-east-1", "g6.xlarge", "L4", 1),
    _offer("gcp", "us-central1", "g2-standard-8", "L4", 1),
    _offer("gcp", "us-central1", "g2-standard-24", "L4", 2),
    _offer("gcp", "us-central1", "g4-standard-12", "RTX Pro 6000", 0.25),
]
IMAGES = NodeImages({"aws": "ami-default", "aws/us-west-2": "ami-west", "gcp": "img"})


def test_pool_specs_cover_every_allowed_group() -> None:
    specs = pool_specs(_policy(), OFFERS, images=IMAGES, project="proj")
    got = [(s.pool, s.region, s.instance_type, s.capacity.value, s.image) for s in specs]
    assert got == [
        ("aws-a100", "us-east-1", "p4d.24xlarge", "spot", "ami-default"),
        ("aws-a100", "us-west-2", "p4d.24xlarge", "spot", "ami-west"),
        ("aws-a100", "us-east-1", "p4d.24xlarge", "on-demand", "ami-default"),
        ("aws-a100", "us-west-2", "p4d.24xlarge", "on-demand", "ami-west"),
        ("gcp-l4", "us-central1", "g2-standard-24", "spot", "img"),
        ("gcp-l4", "us-central1", "g2-standard-8", "spot", "img"),
    ]
    assert {s.max_size for s in specs if s.pool == "aws-a100"} == {4}
    assert {s.project for s in specs} == {"", "proj"}
    assert pool_specs(_policy(), OFFERS, images=IMAGES, pools=["gcp-l4"])[0].pool == "gcp-l4"
    with pytest.raises(KeyError):
        NodeImages({}).for_("aws", "us-east-1")


def test_user_data_is_data_that_names_the_controller_and_runs_the_join_program(
    tmp_path: Path,
) -> None:
    import json

    import yaml

    policy = _policy()
    # A command with both quote kinds: string substitution into YAML broke on these.
    key_cmd = """aws ssm get-parameter --name "/burst/munge" --query 'Parameter.Value'"""
    boot = NodeBootstrap(controller_host="head.example.org", munge_key_command=key_cmd)
    spec = spec_for_offer(
        policy,
        policy.pools[0],
        OFFERS[0],
        CapacityType.SPOT,
        images=IMAGES,
        decision_id="d-42",
        user_data=lambda s: render_user_data(s, boot),
    )
    text = spec.user_data
    assert text.startswith("#cloud-config\n")
    doc = yaml.safe_load(text)
    files = {f["path"]: f for f in doc["write_files"]}
    settings = json.loads(files["/etc/gpu-burst/node.json"]["content"])
    assert settings["conf_server"] == "head.example.org:6817"
    assert settings["munge_key_command"] == key_cmd  # exactly, quotes and all
    got = (settings["cloud"], settings["pool"], settings["decision"])
    assert got == ("aws", "aws-a100", "d-42")
    assert settings["node_key"] == "slurm-node"
    join = files["/usr/local/sbin/gpu-burst-join"]
    assert join["permissions"] == "0755" and join["encoding"] == "gz+b64"
    shipped = (
        Path(__file__).resolve().parents[2] / "infra" / "bootstrap" / "gpu-burst-join.py"
    ).read_bytes()
    assert gzip.decompress(base64.b64decode(join["content"])) == shipped
    assert "/usr/local/sbin/gpu-burst-watch" not in files  # no controller_api: no watcher
    assert doc["runcmd"] == [["/usr/bin/python3", "/usr/local/sbin/gpu-burst-join"]]
    # The node model: a declared CLOUD node joined by name, never a dynamic node (-Z).
    assert "-Z" not in text and "slurmd -N" not in text.replace("slurmd -N <node>", "")


def test_an_aws_vm_is_told_which_ssm_parameter_holds_its_munge_key_never_the_key() -> None:
    from provisioner.act.userdata import node_settings

    boot = NodeBootstrap(controller_host="h", munge_key_parameter="/gpu-burst/ctl/munge-key")
    aws = node_settings(aws_spec(), boot)
    assert aws["munge_key"] == {
        "source": "ssm",
        "name": "/gpu-burst/ctl/munge-key",
        "region": "us-east-1",
        "endpoint": "https://ssm.us-east-1.amazonaws.com",
    }
    local = NodeBootstrap(
        controller_host="h", munge_key_parameter="/k", ssm_endpoint="http://10.77.0.1:5000"
    )
    assert node_settings(aws_spec(), local)["munge_key"]["endpoint"] == "http://10.77.0.1:5000"
    assert node_settings(gcp_spec(), boot)["munge_key"] == {}  # AWS's store only
    assert node_settings(aws_spec(), NodeBootstrap(controller_host="h"))["munge_key"] == {}


def test_a_gce_vm_is_told_which_secret_holds_its_munge_key_never_the_key() -> None:
    from dataclasses import replace

    from provisioner.act.userdata import node_settings
    from provisioner.domain.errors import InvalidArgument

    boot = NodeBootstrap(controller_host="h", munge_key_secret="munge-key")
    spec = replace(gcp_spec(), project="lab-burst")
    assert node_settings(spec, boot)["munge_key"] == {
        "source": "gcp-secret",
        "name": "projects/lab-burst/secrets/munge-key/versions/latest",
        "endpoint": "https://secretmanager.googleapis.com",
    }
    full = NodeBootstrap(
        controller_host="h",
        munge_key_secret="projects/keys/secrets/munge",
        secretmanager_endpoint="http://10.77.0.1:8000",
    )
    assert node_settings(gcp_spec(), full)["munge_key"] == {
        "source": "gcp-secret",
        "name": "projects/keys/secrets/munge/versions/latest",
        "endpoint": "http://10.77.0.1:8000",
    }
    assert node_settings(aws_spec(), boot)["munge_key"] == {}  # GCP's store only
    with pytest.raises(InvalidArgument, match="munge_key_secret"):
        node_settings(replace(gcp_spec(), project=""), boot)  # a bare id and no project


def test_a_vm_is_told_where_to_install_the_gpu_agent_from_never_given_its_token() -> None:
    import json

    from provisioner.act.userdata import AGENT_REQUIREMENTS, node_settings

    api, wheels = "http://10.0.0.2:8000", "https://artifacts.example.org/gpu-burst/"
    boot = NodeBootstrap(controller_host="h", controller_api=api, agent_wheels=wheels)
    agent = node_settings(aws_spec(), boot)["agent"]
    assert agent == {
        "wheels": wheels,
        "package": "gpu-burst-provisioner",
        "requirements": list(AGENT_REQUIREMENTS),
        "interval_s": 15.0,
    }
    assert "token" not in json.dumps(node_settings(aws_spec(), boot)).lower()
    # no wheels, or no API to push to and get a token from: no agent
    assert (
        node_settings(gcp_spec(), NodeBootstrap(controller_host="h", controller_api=api))["agent"]
        == {}
    )
    assert (
        node_settings(aws_spec(), NodeBootstrap(controller_host="h", agent_wheels=wheels))["agent"]
        == {}
    )


def test_a_user_data_cloud_init_would_refuse_is_refused_naming_the_field(tmp_path: Path) -> None:
    from provisioner.act.userdata import check_user_data
    from provisioner.domain.errors import InvalidArgument

    check_user_data("#cloud-config\nruncmd:\n  - [echo, ok]\n")
    with pytest.raises(InvalidArgument, match="runcmd"):
        check_user_data("#cloud-config\nruncmd: 5\n")
    with pytest.raises(InvalidArgument, match=r"write_files\.0"):
        check_user_data("#cloud-config\nwrite_files:\n  - content: x\n")  # no path
    with pytest.raises(InvalidArgument, match="#cloud-config"):
        check_user_data("runcmd: []\n")
    bad = tmp_path / "t.yaml"
    bad.write_text("#cloud-config\npackages: {a: 1}\n")
    policy = _policy()
    with pytest.raises(InvalidArgument, match="packages"):
        spec_for_offer(
            policy,
            policy.pools[0],
            OFFERS[0],
            CapacityType.SPOT,
            images=IMAGES,
            user_data=lambda s: render_user_data(
                s, NodeBootstrap(controller_host="h", template_path=bad)
            ),
        )
