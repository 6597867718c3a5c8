"""GCP's field preflight: for a pool, against Compute Engine, IAM Credentials and Secret Manager:

- the image exists (images are global: one call per distinct image, reported per region), and
  is not OBSOLETE or DELETED, which GCE refuses to boot;
- the VPC network exists and, per region, the subnetwork the VMs land in (pools[].subnetwork,
  else the auto-mode one named like the network), which must belong to that network;
- the network's firewall rules that apply to the VMs (target tags or service account) let
  Slurm's flows through to and from slurmctld's address, with GCE's implied rules (allow every
  egress, deny every ingress) below them (domain/reachability.py: evaluated from the rules);
- the service account exists and may read the munge key's secret (act/field_gcp_access.py:
  the preflight impersonates the account and reads the secret as it).

Not read: hierarchical and network firewall policies, which GCE evaluates before VPC rules.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from ipaddress import ip_network
from typing import Any, TypeVar

from provisioner.act.field_gcp_access import (
    IAM_CREDENTIALS,
    account_and_secret,
    controller_session,
)
from provisioner.act.field_preflight import Missing, SlurmNet
from provisioner.act.gcp import GcpClients
from provisioner.config.models import NodeBootstrap, PoolPolicy
from provisioner.domain.checks import Check
from provisioner.domain.reachability import (
    Network,
    Rule,
    reach_check,
    rule_protocol,
    slurm_flows,
)

ANYWHERE: tuple[Network, ...] = (ip_network("0.0.0.0/0"), ip_network("::/0"))
# GCE's implied rules, below every rule of the network (priority 65535)
IMPLIED = (
    Rule("egress", "all", None, ANYWHERE, allow=True, priority=65535, name="implied-allow-egress"),
    Rule(
        "ingress", "all", None, ANYWHERE, allow=False, priority=65535, name="implied-deny-ingress"
    ),
)
T = TypeVar("T")


def _why(exc: Exception) -> str:
    code, message = getattr(exc, "code", ""), getattr(exc, "message", "") or str(exc)
    message = re.sub(r"^[A-Z]+ \S+: ", "", message)  # the REST transport's "GET <url>: "
    return f"HTTP {code}: {message}" if code else f"{type(exc).__name__}: {message}"


def _get(fn: Callable[[], T], what: str, missing: Missing) -> T:
    """`fn`'s resource; `missing` where GCE answers 404, else the answer's error as a finding."""
    from google.api_core import exceptions as gexc

    try:
        return fn()
    except gexc.NotFound as exc:
        raise Missing(f"{missing.detail} ({_why(exc)})", missing.fix) from None
    except gexc.GoogleAPICallError as exc:
        raise Missing(
            f"reading {what}: {_why(exc)}",
            "check the controller's compute read rights (roles/compute.viewer on the project)",
        ) from None


def _ref(text: str, kind: str, project: str) -> tuple[str, str]:
    """(project, rest) of `projects/P/<kind>/X` (or a URL ending so), `<kind>/X` or `X`."""
    m = re.search(r"(?:^|/)projects/([^/]+)/" + kind + r"/(.+)$", text)
    if m:
        return m[1], m[2]
    m = re.search(r"(?:^|/)" + kind + r"/(.+)$", text)
    return project, m[1] if m else text


class GcpFieldPreflight:
    def __init__(self, clients: GcpClients, iam_endpoint: str | None = None) -> None:
        self.clients = clients
        self.iam_endpoint = iam_endpoint or IAM_CREDENTIALS  # None: Google's own
        self._memo: dict[str, Any] = {}

    def _once(self, key: str, fn: Callable[[], Any]) -> Any:
        if key not in self._memo:
            try:
                self._memo[key] = fn()
            except Missing as m:
                self._memo[key] = m
        found = self._memo[key]
        if isinstance(found, Missing):
            raise found
        return found

    def check_pool(
        self, pool: PoolPolicy, node: NodeBootstrap, images: Mapping[str, str], net: SlurmNet
    ) -> list[Check]:
        self._memo = {}  # one answer per resource within a pool's checks
        project = self.clients.project or node.gcp_project
        out = [self._image(pool, r, images.get(r, ""), project) for r in pool.regions]
        for region in pool.regions:
            out += self._network(pool, region, project, net)
        return out + self._account_and_secret(pool, node, project)

    # ------------------------------------------------------------------ image
    def _image(self, pool: PoolPolicy, region: str, image: str, project: str) -> Check:
        name = f"pool {pool.name} image ({region})"
        if not image:
            return Check(
                name,
                "fail",
                "no image",
                f"set node.images['gcp/{region}'] or pools[{pool.name}].image",
            )
        img_project, rest = _ref(image, "global/images", project)
        family = rest.removeprefix("family/") if rest.startswith("family/") else ""
        client = self.clients.compute("ImagesClient")
        missing = Missing(
            f"image {image} does not exist in project {img_project}",
            f"create it in {img_project}, or point node.images['gcp/<region>'] (or "
            f"pools[{pool.name}].image) at an existing image or family "
            "(projects/<p>/global/images/family/<f>)",
        )

        def fetch() -> Any:
            if family:
                return client.get_from_family(project=img_project, family=family)
            return client.get(project=img_project, image=rest)

        try:
            found = self._once(
                f"image:{img_project}/{rest}", lambda: _get(fetch, f"image {image}", missing)
            )
        except Missing as m:
            return Check(name, "fail", m.detail, m.fix)
        state = found.deprecated.state if "deprecated" in found else ""
        if state in ("OBSOLETE", "DELETED"):
            return Check(
                name, "fail", f"image {found.name} ({image}) is {state}", "name a current image"
            )
        return Check(name, "ok", f"{image} -> {found.name} ({found.status}), images are global")

    # ------------------------------------------------------------------ network and firewall
    def _network(self, pool: PoolPolicy, region: str, project: str, net: SlurmNet) -> list[Check]:
        name = f"pool {pool.name} network ({region})"
        try:
            (net_project, net_name), sub = self._placement(pool, region, project)
            cidr = ip_network(sub.ip_cidr_range)
        except Missing as m:
            return [Check(name, "fail", m.detail, m.fix)]
        placed = Check(
            name, "ok", f"network {net_name} (project {net_project}): {sub.name} {cidr} in {region}"
        )
        fw = f"pool {pool.name} firewall ({region})"
        if net.controller is None:
            skip = "controller_host does not resolve: nothing to evaluate the rules against"
            return [placed, Check(fw, "skip", skip)]
        try:
            rules = self._once(f"fw:{net_project}", lambda: self._list_firewalls(net_project))
        except Missing as m:
            return [placed, Check(fw, "fail", m.detail, m.fix)]
        tags, account = set(pool.network_tags), pool.service_account
        mine = [
            r
            for r in rules
            if _ref(r.network, "global/networks", "") == (net_project, net_name)
            and not r.disabled
            and _applies(r, tags, account)
        ]
        flows = slurm_flows(
            net.controller,
            [cidr],
            slurmctld_port=net.slurmctld_port,
            slurmd_port=net.slurmd_port,
            srun_ports=net.srun_ports,
        )
        target = f"tags {', '.join(sorted(tags))}" if tags else "all instances"
        fix = (
            f"add firewall rules to network {net_name} (project {net_project}) that target the "
            f"pool's VMs ({target}) and allow these (ingress from {net.controller}/32 and the "
            f"subnetwork {cidr}), at a priority number below any deny rule that matches"
        )
        rule_list = [x for r in mine for x in _rules(r, cidr, tags, account)] + list(IMPLIED)
        return [placed, reach_check(fw, flows, rule_list, stateless=False, fix=fix)]

    def _list_firewalls(self, net_project: str) -> list[Any]:
        client = self.clients.compute("FirewallsClient")
        missing = Missing(f"project {net_project} does not exist", "check the network's project")
        return _get(lambda: list(client.list(project=net_project)), "firewall rules", missing)

    def _placement(
        self, pool: PoolPolicy, region: str, project: str
    ) -> tuple[tuple[str, str], Any]:
        """(the network's project and name, the subnetwork the VMs land in, in `region`)."""
        net_project, net_name = _ref(pool.network or "default", "global/networks", project)
        fix_net = f"create it, or set pools[{pool.name}].network to an existing VPC network"
        self._once(
            f"net:{net_project}/{net_name}",
            lambda: _get(
                lambda: self.clients.compute("NetworksClient").get(
                    project=net_project, network=net_name
                ),
                f"network {net_name}",
                Missing(f"network {net_name} does not exist in project {net_project}", fix_net),
            ),
        )
        field = f"pools[{pool.name}].subnetwork"
        if pool.subnetwork:
            sub_project, rest = _ref(pool.subnetwork, "regions", project)
            sub_region, _, sub_name = rest.rpartition("/subnetworks/")
            sub_region = sub_region or region
            if sub_region != region:
                raise Missing(
                    f"subnetwork {pool.subnetwork} is in {sub_region}, not {region}",
                    f"{field}: write it bare ({sub_name}) so each region uses its own of that name",
                )
            missing = Missing(
                f"subnetwork {sub_name} does not exist in {region} (project {sub_project})",
                f"create it on network {net_name} in {region}, or set {field} to one of {region}",
            )
        else:
            sub_project, sub_name = net_project, net_name
            missing = Missing(
                f"network {net_name} has no subnetwork named {net_name} in {region} (project "
                f"{net_project}): not an auto-mode network there",
                f"set {field} to the burst subnetwork of {net_name} in {region}",
            )
        sub = _get(
            lambda: self.clients.compute("SubnetworksClient").get(
                project=sub_project, region=region, subnetwork=sub_name
            ),
            f"subnetwork {sub_name} ({region})",
            missing,
        )
        owner = _ref(sub.network, "global/networks", "")
        if owner != (net_project, net_name):
            raise Missing(
                f"subnetwork {sub_name} ({region}) belongs to network {owner[1]} (project "
                f"{owner[0]}), not to {net_name} (project {net_project})",
                f"set pools[{pool.name}].network to {owner[1]}, or {field} to a subnetwork of "
                f"{net_name}",
            )
        return (net_project, net_name), sub

    def _account_and_secret(
        self, pool: PoolPolicy, node: NodeBootstrap, project: str
    ) -> list[Check]:
        def session() -> Any:  # made only where a service account is to be checked
            return controller_session(self.clients.credentials, self.iam_endpoint)

        return account_and_secret(pool, node, project, session, self.iam_endpoint)


def _applies(rule: Any, tags: set[str], account: str) -> bool:
    """Whether a firewall rule targets the pool's VMs: by service account where it names any
    (never together with target tags), else by tag, else every VM of the network."""
    if rule.target_service_accounts:
        return bool(account) and account in rule.target_service_accounts
    return not rule.target_tags or bool(tags & set(rule.target_tags))


def _rules(rule: Any, subnet: Network, tags: set[str], account: str) -> list[Rule]:
    """A firewall rule as reachability rules. Source tags (or source service accounts) that the
    pool's VMs carry stand for the burst subnetwork, since every VM of the pool carries them."""
    egress = rule.direction == "EGRESS"
    if egress:
        peers: list[Network] = [ip_network(r, strict=False) for r in rule.destination_ranges]
        peers = peers or list(ANYWHERE)
    else:
        peers = [ip_network(r, strict=False) for r in rule.source_ranges]
        if tags & set(rule.source_tags) or (account and account in rule.source_service_accounts):
            peers.append(subnet)
        if not (rule.source_ranges or rule.source_tags or rule.source_service_accounts):
            peers = list(ANYWHERE)  # GCE's default source
    priority = rule.priority if "priority" in rule else 1000
    out: list[Rule] = []
    for spec in list(rule.allowed) or list(rule.denied):
        proto = rule_protocol(spec.I_p_protocol)
        ranges = [_ports(p) for p in spec.ports] if proto != "all" and spec.ports else [None]
        for ports in ranges:
            out.append(
                Rule(
                    "egress" if egress else "ingress",
                    proto,
                    ports,
                    tuple(peers),
                    allow=bool(rule.allowed),
                    priority=priority,
                    name=rule.name,
                )
            )
    return out


def _ports(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)
