"""The field preflight: what a first deployment on a real account needs before its first burst.

From the live slurmctld (`scontrol show config`): configless is on (a burst VM fetches its
slurm.conf from slurmctld), and the ports the VMs must reach (SlurmctldPort, SlurmdPort and
SrunPortRange, which every port check below uses). `node.controller_host` resolves, here (the
controller's resolver: a VPC's own resolver may still differ, docs/field.md). Then each cloud's
field preflight, per pool: image, placement, the network's rules against those ports, the VM's
role and its munge key (act/field_aws.py, act/field_gcp.py).

Only for VMs that join as hosts of their own (`node.node_address: instance`): the same-host
stand-in has no VM, network or role to check.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Mapping
from ipaddress import ip_address

from provisioner.act.field_preflight import SlurmNet
from provisioner.act.ports import CloudPorts
from provisioner.act.specs import NodeImages
from provisioner.config.models import Policy, PoolPolicy
from provisioner.domain.checks import Check
from provisioner.domain.errors import InvalidArgument, UnknownName
from provisioner.domain.reachability import Address
from provisioner.register.slurm_conf import SRUN_PORT_RANGE, port_range

Resolver = Callable[[str], list[str]]
DEFAULT_PORTS = {"SlurmctldPort": "6817", "SlurmdPort": "6818"}


def slurm_config(text: str) -> dict[str, str]:
    """`scontrol show config` as key -> value."""
    return dict(re.findall(r"^(\w+)\s*=\s*(.*?)\s*$", text, flags=re.M))


def configless_check(conf: Mapping[str, str]) -> Check:
    params = conf.get("SlurmctldParameters", "(null)")
    if "enable_configless" in params.split(","):
        return Check("slurm configless", "ok", f"SlurmctldParameters={params}")
    return Check(
        "slurm configless",
        "fail",
        f"SlurmctldParameters={params}: burst VMs cannot fetch slurm.conf from slurmctld",
        "add SlurmctldParameters=enable_configless to slurm.conf, then `scontrol reconfigure`",
    )


def slurm_ports(conf: Mapping[str, str]) -> tuple[int, int, tuple[int, int], Check]:
    """(SlurmctldPort, SlurmdPort, SrunPortRange) of the live cluster, and the check on the
    srun range: without one srun listens on any ephemeral port, which no firewall can name."""
    ctld = int(conf.get("SlurmctldPort", DEFAULT_PORTS["SlurmctldPort"]).split("-")[0])
    slurmd = int(conf.get("SlurmdPort", DEFAULT_PORTS["SlurmdPort"]))
    text = conf.get("SrunPortRange", "0-0")
    try:
        srun = port_range(text)
    except InvalidArgument:
        lo, hi = SRUN_PORT_RANGE
        return (
            ctld,
            slurmd,
            SRUN_PORT_RANGE,
            Check(
                "slurm srun ports",
                "fail",
                f"SrunPortRange={text}: srun listens on random ports, which no firewall rule "
                "can let through to the burst nodes",
                f"set SrunPortRange={lo}-{hi} in slurm.conf (the generated burst slurm.conf "
                "does) and open it from the burst subnet",
            ),
        )
    return ctld, slurmd, srun, Check("slurm srun ports", "ok", f"SrunPortRange={text}")


def system_resolver(host: str) -> list[str]:
    return sorted({str(a[4][0]) for a in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)})


def resolve_controller(host: str, resolve: Resolver) -> tuple[Address | None, Check]:
    name = "controller_host"
    try:
        return ip_address(host), Check(name, "ok", f"{host} is an address")
    except ValueError:
        pass
    try:
        found = resolve(host)
    except OSError as exc:
        found, why = [], str(exc)
    else:
        why = "no address"
    if not found:
        return None, Check(
            name,
            "fail",
            f"node.controller_host {host!r} does not resolve here ({why})",
            "add a record for it in a DNS zone the burst VPC resolves (Route 53 private "
            "hosted zone, Cloud DNS private zone) and here, or set node.controller_host to "
            "slurmctld's address",
        )
    # an IPv4 address first: the VPN or interconnect most sites route is IPv4
    addr = sorted((ip_address(a) for a in found), key=lambda a: a.version)[0]
    return addr, Check(name, "ok", f"{host} -> {', '.join(found)}")


def pool_images(policy: Policy, pool: PoolPolicy) -> dict[str, str]:
    """Region -> the image the pool's VMs boot there ("" where none is configured), chosen as
    the specs choose it (`pools[].image`, else `node.images`)."""
    images = NodeImages({pool.cloud: pool.image} if pool.image else policy.node.images)
    out: dict[str, str] = {}
    for region in pool.regions:
        try:
            out[region] = images.for_(pool.cloud, region)
        except UnknownName:
            out[region] = ""
    return out


def field_checks(
    policy: Policy,
    clouds: Mapping[str, CloudPorts],
    slurm_conf: Mapping[str, str] | None,
    *,
    resolve: Resolver = system_resolver,
) -> list[Check]:
    """Every field check, for the pools whose clouds have a field preflight."""
    if policy.node.node_address != "instance":
        return [Check("field", "skip", "node.node_address is registration: no VM of its own")]
    out: list[Check] = []
    conf = slurm_conf if slurm_conf is not None else DEFAULT_PORTS
    if slurm_conf is not None:
        out.append(configless_check(slurm_conf))
    ctld, slurmd, srun, srun_check = slurm_ports(conf)
    if slurm_conf is not None:
        out.append(srun_check)
    controller, resolved = resolve_controller(policy.node.controller_host, resolve)
    out.append(resolved)
    net = SlurmNet(controller, ctld, slurmd, srun)
    for pool in policy.pools:
        ports = clouds.get(pool.cloud)
        if ports is None or ports.field is None:
            continue
        try:
            out += ports.field.check_pool(pool, policy.node, pool_images(policy, pool), net)
        except Exception as exc:  # an SDK's surprise: the verdict names it, the others still run
            out.append(
                Check(f"pool {pool.name} field", "fail", f"{type(exc).__name__}: {exc}"[:300])
            )
    return out
