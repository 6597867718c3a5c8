"""GCP's field preflight (act/field_gcp.py) through the real google-cloud-compute clients against
the GCE fake, which also serves IAM Credentials' generateAccessToken and Secret Manager: one
healthy pool, then each thing that can be wrong with it, one at a time. Expected names and
verdicts come from each test's own setup."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field
from ipaddress import ip_address
from typing import Any

import pytest
import requests
from cloud_helpers import GcpEnv

from provisioner.act.field_gcp import GcpFieldPreflight
from provisioner.act.field_preflight import SlurmNet
from provisioner.config.models import NodeBootstrap, PoolPolicy
from provisioner.domain.checks import Check
from provisioner.domain.reachability import Address

pytestmark = pytest.mark.gcp

PROJECT = "burst-proj"  # the gce fixture's GcpClients project
IMAGES_PROJECT = "burst-images"
REGION = "us-central1"
OTHER_REGION = "us-east1"
IMAGE = f"projects/{IMAGES_PROJECT}/global/images/family/slurm-node"
TAG = "gpu-burst"
ACCOUNT = f"burst-node@{PROJECT}.iam.gserviceaccount.com"
SECRET = "munge-key"
KEY = bytes(range(256)) * 4
CONTROLLER = ip_address("192.0.2.10")
SRUN = (60001, 63000)


def compute() -> Any:
    from google.cloud import compute_v1

    return compute_v1


def firewall(**fields: Any) -> Any:
    c = compute()
    allowed = [c.Allowed(I_p_protocol=p, ports=ports) for p, ports in fields.pop("allow", [])]
    denied = [c.Denied(I_p_protocol=p, ports=ports) for p, ports in fields.pop("deny", [])]
    return c.Firewall(allowed=allowed, denied=denied, **fields)


def healthy_rules() -> list[Any]:
    """Slurmd's port from slurmctld and from the pool's own VMs (by tag); every egress the pool
    needs (slurmctld, srun's range) is left to GCE's implied allow-egress rule."""
    return [
        firewall(
            name="slurmd-from-ctl",
            network="global/networks/burst-vpc",
            source_ranges=[f"{CONTROLLER}/32"],
            target_tags=[TAG],
            allow=[("tcp", ["6818"])],
        ),
        firewall(
            name="slurmd-fanout",
            network="global/networks/burst-vpc",
            source_tags=[TAG],
            target_tags=[TAG],
            allow=[("tcp", ["6818"])],
        ),
    ]


@dataclass
class Case:
    regions: list[str] = field(default_factory=lambda: [REGION])
    subnetwork: str = "burst-sub"
    images: dict[str, str] = field(default_factory=lambda: {REGION: IMAGE})
    controller: Address | None = CONTROLLER
    rules: list[Any] = field(default_factory=healthy_rules)
    account: bool = True
    impersonable: bool = True
    grant: bool = True


def run(env: GcpEnv, case: Case) -> dict[str, Check]:
    fake = env.fake
    fake.add_image(IMAGES_PROJECT, "slurm-node-v2", family="slurm-node")
    fake.add_network(PROJECT, "burst-vpc")
    fake.add_subnetwork(PROJECT, REGION, "burst-sub", "burst-vpc", "10.0.8.0/24")
    fake.add_network(PROJECT, "other-vpc")
    fake.add_subnetwork(PROJECT, REGION, "other-sub", "other-vpc", "10.9.0.0/24")
    client = env.clients._make("FirewallsClient")
    for rule in case.rules:  # inserted as a user would, through the real client
        env.clients.wait(client.insert_unary(project=PROJECT, firewall_resource=rule))
    if case.account:
        fake.add_service_account(ACCOUNT, impersonable=case.impersonable)
    fake.secret_manager.add_version(PROJECT, SECRET, KEY)
    if case.grant:
        fake.secret_manager.grant_access(PROJECT, SECRET, ACCOUNT)
    pool = PoolPolicy(
        name="gpu",
        cloud="gcp",
        regions=case.regions,
        gpu_model="A100",
        network="burst-vpc",
        subnetwork=case.subnetwork,
        network_tags=[TAG],
        service_account=ACCOUNT,
    )
    node = NodeBootstrap(
        munge_key_secret=SECRET, secretmanager_endpoint=fake.endpoint, gcp_project=PROJECT
    )
    net = SlurmNet(case.controller, 6817, 6818, SRUN)
    checks = GcpFieldPreflight(env.clients, iam_endpoint=fake.endpoint).check_pool(
        pool, node, case.images, net
    )
    assert len({c.name for c in checks}) == len(checks)
    return {c.name: c for c in checks}


def test_a_healthy_pool_passes_every_check(gce: GcpEnv) -> None:
    got = run(gce, Case())
    assert {n: c.verdict for n, c in got.items()} == {
        f"pool gpu image ({REGION})": "ok",
        f"pool gpu network ({REGION})": "ok",
        f"pool gpu firewall ({REGION})": "ok",
        "pool gpu service account": "ok",
        "pool gpu munge key": "ok",
    }
    assert "slurm-node-v2" in got[f"pool gpu image ({REGION})"].detail
    assert "10.0.8.0/24" in got[f"pool gpu network ({REGION})"].detail
    munge = got["pool gpu munge key"].detail
    assert f"{len(KEY)} bytes" in munge
    assert base64.b64encode(KEY).decode()[:16] not in munge  # its length, never its value


def _deny_srun_egress(c: Case) -> None:
    c.rules.append(
        firewall(
            name="no-srun-back",
            network="global/networks/burst-vpc",
            direction="EGRESS",
            priority=900,
            destination_ranges=[f"{CONTROLLER}/32"],
            deny=[("tcp", [f"{SRUN[0]}-{SRUN[1]}"])],
        )
    )


def _other_targets(c: Case) -> None:
    for rule in c.rules:
        rule.target_tags = ["cpu-nodes"]


def _second_region(c: Case) -> None:
    c.regions = [REGION, OTHER_REGION]
    c.images = {REGION: IMAGE, OTHER_REGION: IMAGE}


def _set(**kw: Any) -> Callable[[Case], None]:
    def apply(c: Case) -> None:
        for k, v in kw.items():
            setattr(c, k, v)

    return apply


FIREWALL = f"pool gpu firewall ({REGION})"
BROKEN = [
    pytest.param(
        _set(images={REGION: f"projects/{IMAGES_PROJECT}/global/images/no-such-image"}),
        f"pool gpu image ({REGION})",
        "fail",
        ["no-such-image", IMAGES_PROJECT],
        {},
        id="image-missing",
    ),
    pytest.param(
        _second_region,
        f"pool gpu network ({OTHER_REGION})",
        "fail",
        ["burst-sub", OTHER_REGION, PROJECT],
        {},
        id="subnetwork-missing-in-region",
    ),
    pytest.param(
        _set(subnetwork="other-sub"),
        f"pool gpu network ({REGION})",
        "fail",
        ["other-sub", "other-vpc", "burst-vpc"],
        {FIREWALL: None},  # no subnetwork: no firewall to evaluate
        id="subnetwork-of-another-network",
    ),
    pytest.param(
        _set(rules=healthy_rules()[1:]),
        FIREWALL,
        "fail",
        ["6818", f"{CONTROLLER}/32"],
        {},
        id="no-ingress-from-controller",
    ),
    pytest.param(
        _deny_srun_egress,
        FIREWALL,
        "fail",
        [f"{SRUN[0]}-{SRUN[1]}", "egress"],
        {},
        id="egress-deny-srun-range",
    ),
    pytest.param(
        _other_targets, FIREWALL, "fail", ["6818", "ingress"], {}, id="rules-for-other-tags"
    ),
    pytest.param(
        _set(account=False),
        "pool gpu service account",
        "fail",
        [ACCOUNT, PROJECT, "does not exist"],
        {"pool gpu munge key": "skip"},
        id="account-missing",
    ),
    pytest.param(
        _set(grant=False),
        "pool gpu munge key",
        "fail",
        [ACCOUNT, f"projects/{PROJECT}/secrets/{SECRET}", "403"],
        {},
        id="account-may-not-read-secret",
    ),
    pytest.param(
        _set(impersonable=False),
        "pool gpu service account",
        "warn",
        [ACCOUNT, "403"],
        {"pool gpu munge key": "skip"},
        id="not-impersonable",
    ),
    pytest.param(
        _set(controller=None), FIREWALL, "skip", ["controller_host"], {}, id="controller-unresolved"
    ),
]


@pytest.mark.parametrize(("breaks", "name", "verdict", "named", "also"), BROKEN)
def test_each_fault_is_named_with_its_fix_and_nothing_else_fails(
    gce: GcpEnv,
    breaks: Callable[[Case], None],
    name: str,
    verdict: str,
    named: list[str],
    also: dict[str, str | None],
) -> None:
    case = Case()
    breaks(case)
    got = run(gce, case)
    check = got[name]
    assert check.verdict == verdict, check.line()
    for needle in named:
        assert needle in check.detail, check.line()
    if verdict in ("fail", "warn"):
        assert check.fix
    for other, expected in also.items():
        assert got.get(other, Check(other, None, "")).verdict == expected  # type: ignore[arg-type]
    rest = {n: c.verdict for n, c in got.items() if n != name and n not in also}
    assert set(rest.values()) == {"ok"}, rest


def test_the_default_network_lets_the_pool_talk_but_not_slurmctld(gce: GcpEnv) -> None:
    """GCE's default network: its rules let its own ranges in (default-allow-internal), not an
    on-premises slurmctld."""
    gce.fake.add_default_network(PROJECT, (REGION,))
    gce.fake.add_image(PROJECT, "slurm-node-v1")
    pool = PoolPolicy(name="gpu", cloud="gcp", regions=[REGION], gpu_model="A100")
    net = SlurmNet(CONTROLLER, 6817, 6818, SRUN)
    got = {
        c.name: c
        for c in GcpFieldPreflight(gce.clients, iam_endpoint=gce.fake.endpoint).check_pool(
            pool, NodeBootstrap(), {REGION: "slurm-node-v1"}, net
        )
    }
    assert got[f"pool gpu image ({REGION})"].verdict == "ok"
    assert "10.128.0.0/20" in got[f"pool gpu network ({REGION})"].detail
    fw = got[FIREWALL]
    assert fw.verdict == "fail" and "6818" in fw.detail and f"{CONTROLLER}/32" in fw.detail
    assert "fan-out" not in fw.detail  # within 10.128.0.0/20: let through
    assert "default" in fw.fix


# ----------------------------------------------------------------------------- the fake's routes
def test_images_by_name_and_by_family_the_newest_wins(gce: GcpEnv) -> None:
    from google.api_core import exceptions as gexc

    gce.fake.add_image(IMAGES_PROJECT, "slurm-node-v1", family="slurm-node")
    gce.fake.add_image(IMAGES_PROJECT, "slurm-node-v2", family="slurm-node")
    images = gce.clients._make("ImagesClient")
    assert images.get(project=IMAGES_PROJECT, image="slurm-node-v1").name == "slurm-node-v1"
    newest = images.get_from_family(project=IMAGES_PROJECT, family="slurm-node")
    assert newest.name == "slurm-node-v2" and newest.status == "READY"
    with pytest.raises(gexc.NotFound) as info:
        images.get(project=IMAGES_PROJECT, image="nothing")
    assert f"projects/{IMAGES_PROJECT}/global/images/nothing" in str(info.value)
    with pytest.raises(gexc.NotFound):
        images.get_from_family(project=IMAGES_PROJECT, family="no-family")


def test_firewall_insert_list_and_get_with_gces_defaults(gce: GcpEnv) -> None:
    from google.api_core import exceptions as gexc

    gce.fake.add_network(PROJECT, "burst-vpc")
    client = gce.clients._make("FirewallsClient")
    rule = firewall(name="ssh", network="global/networks/burst-vpc", allow=[("tcp", ["22"])])
    gce.clients.wait(client.insert_unary(project=PROJECT, firewall_resource=rule))
    egress = firewall(
        name="out", network="global/networks/burst-vpc", direction="EGRESS", deny=[("all", [])]
    )
    gce.clients.wait(client.insert_unary(project=PROJECT, firewall_resource=egress))
    listed = {r.name: r for r in client.list(project=PROJECT)}
    assert set(listed) == {"ssh", "out"}
    ssh = client.get(project=PROJECT, firewall="ssh")
    assert ssh.priority == 1000 and ssh.direction == "INGRESS" and not ssh.disabled
    assert list(ssh.source_ranges) == ["0.0.0.0/0"]  # no source given: GCE's default
    assert ssh.network.endswith(f"/projects/{PROJECT}/global/networks/burst-vpc")
    assert list(listed["out"].destination_ranges) == ["0.0.0.0/0"]
    with pytest.raises(gexc.Conflict):
        client.insert_unary(project=PROJECT, firewall_resource=rule)
    nowhere = firewall(name="x", network="global/networks/missing", allow=[("tcp", ["1"])])
    with pytest.raises(gexc.NotFound):
        client.insert_unary(project=PROJECT, firewall_resource=nowhere)


def test_default_network_subnetworks_and_rules_as_gce_makes_them(gce: GcpEnv) -> None:
    gce.fake.add_default_network(PROJECT, (REGION, OTHER_REGION, "europe-west4"))
    subnets = gce.clients._make("SubnetworksClient")
    ranges = {
        r: subnets.get(project=PROJECT, region=r, subnetwork="default").ip_cidr_range
        for r in (REGION, OTHER_REGION, "europe-west4")
    }
    assert ranges == {
        REGION: "10.128.0.0/20",
        OTHER_REGION: "10.142.0.0/20",
        "europe-west4": "10.164.0.0/20",
    }
    net = gce.clients._make("NetworksClient").get(project=PROJECT, network="default")
    assert net.auto_create_subnetworks and len(net.subnetworks) == 3
    rules = {r.name: r for r in gce.clients._make("FirewallsClient").list(project=PROJECT)}
    assert set(rules) == {
        "default-allow-internal",
        "default-allow-ssh",
        "default-allow-rdp",
        "default-allow-icmp",
    }
    assert {r.priority for r in rules.values()} == {65534}
    assert list(rules["default-allow-internal"].source_ranges) == ["10.128.0.0/9"]


def test_generate_access_token_mints_a_token_secret_manager_takes(gce: GcpEnv) -> None:
    fake = gce.fake
    fake.add_service_account(ACCOUNT)
    fake.add_service_account("locked@burst-proj.iam.gserviceaccount.com", impersonable=False)
    fake.secret_manager.add_version(PROJECT, SECRET, KEY)
    fake.secret_manager.grant_access(PROJECT, SECRET, ACCOUNT)

    def generate(email: str, body: Any) -> requests.Response:
        url = f"{fake.endpoint}/v1/projects/-/serviceAccounts/{email}:generateAccessToken"
        return requests.post(url, json=body, timeout=5)

    scope = {"scope": ["https://www.googleapis.com/auth/cloud-platform"]}
    ok = generate(ACCOUNT, scope)
    assert ok.status_code == 200 and ok.json()["expireTime"].endswith("Z")
    token = ok.json()["accessToken"]
    read = requests.get(
        f"{fake.endpoint}/v1/projects/{PROJECT}/secrets/{SECRET}/versions/latest:access",
        headers={"Authorization": f"Bearer {token}"},
        timeout=5,
    )
    assert read.status_code == 200
    assert base64.b64decode(read.json()["payload"]["data"]) == KEY
    missing = generate("ghost@burst-proj.iam.gserviceaccount.com", scope)
    assert missing.status_code == 404 and missing.json()["error"]["status"] == "NOT_FOUND"
    denied = generate("locked@burst-proj.iam.gserviceaccount.com", scope)
    assert denied.status_code == 403 and denied.json()["error"]["status"] == "PERMISSION_DENIED"
    assert "iam.serviceAccounts.getAccessToken" in denied.json()["error"]["message"]
    assert generate(ACCOUNT, {}).status_code == 400
