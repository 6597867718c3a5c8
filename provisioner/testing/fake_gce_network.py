"""Images, VPC networks, subnetworks and firewall rules of the GCE fake
(provisioner/testing/fake_gce.py routes their paths here), in the real wire format:

* `GET .../global/images/<name>` and `.../global/images/family/<family>` (getFromFamily: the
  newest image of the family);
* `GET .../global/networks/<name>`, `GET .../regions/<r>/subnetworks/<name>`;
* `GET .../global/firewalls` (list), `GET .../global/firewalls/<name>`, `POST .../global/firewalls`
  (insert, answered with an Operation). As GCE fills them in: `priority` 1000, `direction`
  INGRESS, `disabled` false, an ingress rule with no source gets `sourceRanges` 0.0.0.0/0 and an
  egress rule with no destination `destinationRanges` 0.0.0.0/0.

Nothing exists until a test adds it (`add_image`, `add_network`, `add_subnetwork`,
`add_firewall`); `add_default_network` makes a project's `default` network as GCE creates it:
auto-mode subnetworks in the regions asked for and the four default firewall rules.
Simplified: read-only apart from firewall insert; list ignores `filter` and never pages; no
network firewall policies; links use the fake's endpoint rather than www.googleapis.com.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable
from typing import Any

from provisioner.domain.errors import UnknownName

Json = dict[str, Any]
Answer = tuple[int, Json]
OpFn = Callable[[str, str, str], Json]  # (project, target link, operation type) -> Operation

_P = r"/compute/v1/projects/(?P<project>[^/]+)"
ANY_V4 = "0.0.0.0/0"

# The primary ranges of an auto-mode network's subnetworks, per region
# (https://cloud.google.com/vpc/docs/subnets#ip-ranges, "Auto mode IPv4 ranges").
AUTO_RANGES = {
    "us-central1": "10.128.0.0/20",
    "europe-west1": "10.132.0.0/20",
    "us-west1": "10.138.0.0/20",
    "asia-east1": "10.140.0.0/20",
    "us-east1": "10.142.0.0/20",
    "asia-northeast1": "10.146.0.0/20",
    "asia-southeast1": "10.148.0.0/20",
    "us-east4": "10.150.0.0/20",
    "europe-west2": "10.154.0.0/20",
    "europe-west3": "10.156.0.0/20",
    "europe-west4": "10.164.0.0/20",
    "us-west2": "10.168.0.0/20",
}


def _default_rules() -> list[Json]:
    """The default network's pre-populated rules, as GCE creates them
    (https://cloud.google.com/vpc/docs/firewalls#more_rules_default_vpc)."""
    every = [{"IPProtocol": p, "ports": ["0-65535"]} for p in ("tcp", "udp")]
    return [
        {
            "name": "default-allow-internal",
            "sourceRanges": ["10.128.0.0/9"],  # every auto-mode range
            "allowed": [*every, {"IPProtocol": "icmp"}],
        },
        {
            "name": "default-allow-ssh",
            "sourceRanges": [ANY_V4],
            "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}],
        },
        {
            "name": "default-allow-rdp",
            "sourceRanges": [ANY_V4],
            "allowed": [{"IPProtocol": "tcp", "ports": ["3389"]}],
        },
        {
            "name": "default-allow-icmp",
            "sourceRanges": [ANY_V4],
            "allowed": [{"IPProtocol": "icmp"}],
        },
    ]


def gce_error(code: int, message: str, reason: str, status: str = "") -> Answer:
    return code, {
        "error": {
            "code": code,
            "message": message,
            "status": status,
            "errors": [{"message": message, "domain": "global", "reason": reason}],
        }
    }


def _not_found(what: str) -> Answer:
    return gce_error(404, f"The resource '{what}' was not found", "notFound", "NOT_FOUND")


class FakeGceNetwork:
    def __init__(self, base: Callable[[str], str], now: Callable[[], str]) -> None:
        self._base = base  # project -> the link prefix of its resources
        self._now = now
        self._ids = itertools.count(5001)
        self.images: dict[tuple[str, str], Json] = {}  # (project, name)
        self.networks: dict[tuple[str, str], Json] = {}  # (project, name)
        self.subnetworks: dict[tuple[str, str, str], Json] = {}  # (project, region, name)
        self.firewalls: dict[tuple[str, str], Json] = {}  # (project, name)

    def _new(self, kind: str, link: str, name: str) -> Json:
        return {
            "kind": f"compute#{kind}",
            "id": str(next(self._ids)),
            "name": name,
            "selfLink": link,
            "creationTimestamp": self._now(),
        }

    # ------------------------------------------------------------------ Python API
    def add_image(self, project: str, name: str, family: str = "") -> Json:
        image = self._new("image", f"{self._base(project)}/global/images/{name}", name)
        image["status"] = "READY"
        if family:
            image["family"] = family
        self.images[(project, name)] = image
        return image

    def add_network(self, project: str, name: str, *, auto: bool = False) -> Json:
        net = self._new("network", f"{self._base(project)}/global/networks/{name}", name)
        net.update(autoCreateSubnetworks=auto, subnetworks=[])
        net["routingConfig"] = {"routingMode": "REGIONAL"}
        self.networks[(project, name)] = net
        return net

    def add_subnetwork(
        self, project: str, region: str, name: str, network: str, ip_cidr_range: str
    ) -> Json:
        """`network`: a name in `project`, or a link to another project's network."""
        key = (project, network) if "/" not in network else _key(network, "global/networks")
        net = self.networks.get(key)
        if net is None:
            raise UnknownName(f"fake_gce: no network {network} in project {key[0]}")
        link = f"{self._base(project)}/regions/{region}/subnetworks/{name}"
        sub = self._new("subnetwork", link, name)
        sub.update(
            network=net["selfLink"],
            region=f"{self._base(project)}/regions/{region}",
            ipCidrRange=ip_cidr_range,
            gatewayAddress=ip_cidr_range.split("/")[0].rsplit(".", 1)[0] + ".1",
        )
        self.subnetworks[(project, region, name)] = sub
        net["subnetworks"].append(link)
        return sub

    def add_firewall(self, project: str, body: Json) -> Json:
        """A firewall rule as `firewalls.insert` stores it (GCE's defaults filled in)."""
        name = str(body["name"])
        rule = dict(body)
        rule.update(self._new("firewall", f"{self._base(project)}/global/firewalls/{name}", name))
        net = str(body.get("network") or "global/networks/default")
        rule["network"] = self.networks[_key(net, "global/networks", project)]["selfLink"]
        rule.setdefault("priority", 1000)
        rule.setdefault("direction", "INGRESS")
        rule.setdefault("disabled", False)
        if rule["direction"] == "INGRESS" and not any(
            rule.get(k) for k in ("sourceRanges", "sourceTags", "sourceServiceAccounts")
        ):
            rule["sourceRanges"] = [ANY_V4]
        if rule["direction"] == "EGRESS" and not rule.get("destinationRanges"):
            rule["destinationRanges"] = [ANY_V4]
        self.firewalls[(project, name)] = rule
        return rule

    def add_default_network(self, project: str, regions: Iterable[str] = ("us-central1",)) -> None:
        """The `default` network as GCE makes it: auto mode, one subnetwork per region (named
        `default`, GCE's auto-mode range), and its four default rules."""
        self.add_network(project, "default", auto=True)
        for region in regions:
            if region not in AUTO_RANGES:
                raise UnknownName(f"fake_gce: no auto-mode range known for {region}")
            self.add_subnetwork(project, region, "default", "default", AUTO_RANGES[region])
        for rule in _default_rules():
            self.add_firewall(
                project, {**rule, "network": "global/networks/default", "priority": 65534}
            )

    # ------------------------------------------------------------------ wire
    def route(self, method: str, path: str, body: Any, op: OpFn, apply: bool) -> Answer | None:
        """The answer to a request for one of these resources; None: not one of them."""
        m = re.fullmatch(_P + r"/global/images/family/(?P<family>[^/]+)", path)
        if m and method == "GET":
            return self._family(m["project"], m["family"])
        m = re.fullmatch(_P + r"/global/(?P<kind>images|networks)/(?P<name>[^/]+)", path)
        if m and method == "GET":
            found = (self.images if m["kind"] == "images" else self.networks).get(
                (m["project"], m["name"])
            )
            where = f"projects/{m['project']}/global/{m['kind']}/{m['name']}"
            return (200, found) if found else _not_found(where)
        m = re.fullmatch(_P + r"/regions/(?P<region>[^/]+)/subnetworks/(?P<name>[^/]+)", path)
        if m and method == "GET":
            sub = self.subnetworks.get((m["project"], m["region"], m["name"]))
            where = f"projects/{m['project']}/regions/{m['region']}/subnetworks/{m['name']}"
            return (200, sub) if sub else _not_found(where)
        m = re.fullmatch(_P + r"/global/firewalls(?:/(?P<name>[^/]+))?", path)
        if m:
            return self._firewalls(method, m["project"], m["name"], body, op, apply)
        return None

    def _family(self, project: str, family: str) -> Answer:
        members = [
            i for (p, _), i in self.images.items() if p == project and i.get("family") == family
        ]
        if not members:
            return _not_found(f"projects/{project}/global/images/family/{family}")
        return 200, members[-1]  # the newest: the last one added

    def _firewalls(
        self, method: str, project: str, name: str | None, body: Any, op: OpFn, apply: bool
    ) -> Answer:
        if method == "GET" and name is None:
            items = [r for (p, _), r in self.firewalls.items() if p == project]
            return 200, {"kind": "compute#firewallList", "items": items}
        if method == "GET" and name is not None:
            rule = self.firewalls.get((project, name))
            return (
                (200, rule) if rule else _not_found(f"projects/{project}/global/firewalls/{name}")
            )
        if method != "POST" or name is not None:
            return gce_error(405, "method not allowed", "badRequest")
        body = body or {}
        rname = str(body.get("name", ""))
        if not rname:
            return gce_error(400, "Required field 'resource.name' not specified", "required")
        if (project, rname) in self.firewalls:
            return gce_error(
                409,
                f"The resource 'projects/{project}/global/firewalls/{rname}' already exists",
                "alreadyExists",
            )
        if body.get("allowed") and body.get("denied"):
            return gce_error(400, "A rule may not have both allowed and denied", "invalid")
        net = str(body.get("network") or "global/networks/default")
        if _key(net, "global/networks", project) not in self.networks:
            return _not_found(net)
        if apply:
            self.add_firewall(project, body)
        return 200, op(project, f"{self._base(project)}/global/firewalls/{rname}", "insert")


def _key(ref: str, kind: str, project: str = "") -> tuple[str, str]:
    """(project, name) of `projects/P/<kind>/N` (or a URL ending so), `<kind>/N` or `N`."""
    m = re.search(r"(?:^|/)projects/([^/]+)/" + kind + r"/([^/]+)$", ref)
    if m:
        return m[1], m[2]
    return project, ref.rsplit("/", 1)[-1]
