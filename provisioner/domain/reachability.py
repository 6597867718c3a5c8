"""Whether a burst VM's network lets Slurm through, evaluated from the rules in code.

No cloud answers "may this packet pass?" for an address outside it (AWS's Reachability Analyzer
and GCP's Connectivity Tests stop at the VPN or interconnect, and neither has a stand-in here),
so the preflight reads the rules (security groups and network ACLs, GCE firewall rules) and
evaluates the flows Slurm needs against them:

- slurmd, and srun on the burst node, reach slurmctld (SlurmctldPort, egress from the VM);
- slurmctld, and srun on the controller's host, reach the node's slurmd (SlurmdPort, ingress);
- slurmstepd on the node reaches back to srun's ports on the submit host (SrunPortRange, egress);
- slurmd forwards to slurmd within the burst subnet (message fan-out), both ways.

Rules are TCP only here: a rule for another protocol never matches. A rule decides a flow's port
only where its peer range holds the whole peer (the controller's address, or the burst subnet);
a deny rule decides wherever its range overlaps the peer. The lowest priority number that
matches wins (GCE priority, NACL rule number); with no match the port is closed, so an adapter
states its cloud's implied rules (GCE: deny ingress, allow egress) as rules of its own.
Stateless layers (NACLs) also need the answer's way back: to the ephemeral ports of whoever
opened the connection (Linux: 32768-60999).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_network
from typing import Literal

from provisioner.domain.checks import Check

Direction = Literal["ingress", "egress"]  # as the burst VM sees it
Network = IPv4Network | IPv6Network
Address = IPv4Address | IPv6Address
Ports = tuple[int, int]  # inclusive
EPHEMERAL: Ports = (32768, 60999)  # Linux's net.ipv4.ip_local_port_range default
ALL_PORTS: Ports = (0, 65535)


@dataclass(frozen=True, slots=True)
class Flow:
    purpose: str
    direction: Direction
    peer: Network
    ports: Ports

    def back(self) -> Flow:
        """The answer's way back, which a stateless layer must let through too."""
        other: Direction = "egress" if self.direction == "ingress" else "ingress"
        return Flow(f"{self.purpose} (the answer)", other, self.peer, EPHEMERAL)


def rule_protocol(name: str) -> str:
    """A cloud's protocol field as a rule's: "all" (AWS "-1", GCE "all"), "tcp" ("tcp" or its
    number, 6), else "other", which never matches a TCP flow."""
    return {"-1": "all", "all": "all", "tcp": "tcp", "6": "tcp"}.get(str(name).lower(), "other")


@dataclass(frozen=True, slots=True)
class Rule:
    direction: Direction
    protocol: str  # "all", "tcp", or another (which never matches)
    ports: Ports | None  # None: every port
    peers: tuple[Network, ...]
    allow: bool = True
    priority: int = 0  # lower decides first
    name: str = ""

    def decides(self, flow: Flow, port: int) -> bool:
        if self.direction != flow.direction or self.protocol not in ("all", "tcp"):
            return False
        if self.ports is not None and not self.ports[0] <= port <= self.ports[1]:
            return False
        if self.allow:
            return any(_holds(p, flow.peer) for p in self.peers)
        return any(_overlaps(p, flow.peer) for p in self.peers)


def _holds(outer: Network, inner: Network) -> bool:
    return outer.version == inner.version and inner.subnet_of(outer)  # type: ignore[arg-type]


def _overlaps(a: Network, b: Network) -> bool:
    return a.version == b.version and a.overlaps(b)  # type: ignore[arg-type]


def host_network(address: Address) -> Network:
    return ip_network(f"{address}/{address.max_prefixlen}")


def slurm_flows(
    controller: Address,
    subnets: Sequence[Network],
    *,
    slurmctld_port: int,
    slurmd_port: int,
    srun_ports: Ports,
) -> list[Flow]:
    ctl = host_network(controller)
    flows = [
        Flow("slurmd and srun reach slurmctld", "egress", ctl, (slurmctld_port, slurmctld_port)),
        Flow("slurmctld and srun reach slurmd", "ingress", ctl, (slurmd_port, slurmd_port)),
        Flow("slurmstepd reaches srun's ports (SrunPortRange)", "egress", ctl, srun_ports),
    ]
    for net in subnets:
        for d in ("ingress", "egress"):
            flows.append(
                Flow(f"slurmd fan-out within {net}", d, net, (slurmd_port, slurmd_port))  # type: ignore[arg-type]
            )
    return flows


def closed_ports(flow: Flow, rules: Iterable[Rule]) -> list[Ports]:
    """The ports of `flow` the rules do not let through, as inclusive ranges."""
    ordered = sorted(rules, key=lambda r: (r.priority, r.allow))  # a tie: deny first
    closed: list[Ports] = []
    for port in range(flow.ports[0], flow.ports[1] + 1):
        rule = next((r for r in ordered if r.decides(flow, port)), None)
        if rule is None or not rule.allow:
            if closed and closed[-1][1] == port - 1:
                closed[-1] = (closed[-1][0], port)
            else:
                closed.append((port, port))
    return closed


def show_ports(ranges: Sequence[Ports]) -> str:
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)


def reach_check(
    name: str, flows: Sequence[Flow], rules: Sequence[Rule], *, stateless: bool, fix: str
) -> Check:
    """One layer's verdict on every flow: ok, or fail naming each flow and its closed ports."""
    gaps: list[str] = []
    for flow in flows:
        for f in (flow, flow.back()) if stateless else (flow,):
            closed = closed_ports(f, rules)
            if closed:
                gaps.append(f"{f.purpose}: {f.direction} tcp {show_ports(closed)} {f.peer}")
    if gaps:
        return Check(name, "fail", "closed: " + "; ".join(gaps), fix)
    ports = sorted({f.ports for f in flows})
    return Check(name, "ok", f"lets through tcp {show_ports(ports)} for {len(flows)} flow(s)")
