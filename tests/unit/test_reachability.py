"""Slurm's flows against rules, evaluated in code (domain/reachability.py), on hand-made rule
sets whose answers are worked out by hand: the lowest priority decides, a deny overlapping the
peer closes, an allow must hold the whole peer, and a stateless layer needs the way back."""

from __future__ import annotations

from ipaddress import ip_address, ip_network

from provisioner.domain.reachability import (
    Rule,
    closed_ports,
    reach_check,
    show_ports,
    slurm_flows,
)

CTL = ip_address("192.0.2.10")
SUBNET = ip_network("10.0.8.0/24")
FLOWS = slurm_flows(CTL, [SUBNET], slurmctld_port=6817, slurmd_port=6818, srun_ports=(60001, 63000))
ANY = (ip_network("0.0.0.0/0"),)


def by_purpose(prefix: str):
    return next(f for f in FLOWS if f.purpose.startswith(prefix))


def test_slurm_needs_five_flows_on_the_live_ports() -> None:
    got = {(f.direction, f.ports, str(f.peer)) for f in FLOWS}
    assert got == {
        ("egress", (6817, 6817), "192.0.2.10/32"),
        ("ingress", (6818, 6818), "192.0.2.10/32"),
        ("egress", (60001, 63000), "192.0.2.10/32"),
        ("ingress", (6818, 6818), "10.0.8.0/24"),
        ("egress", (6818, 6818), "10.0.8.0/24"),
    }


def test_no_rule_closes_everything_and_an_allow_all_opens_everything() -> None:
    srun = by_purpose("slurmstepd")
    assert closed_ports(srun, []) == [(60001, 63000)]
    assert closed_ports(srun, [Rule("egress", "all", None, ANY)]) == []


def test_the_lowest_priority_decides_and_a_tie_goes_to_deny() -> None:
    srun = by_purpose("slurmstepd")
    allow = Rule("egress", "tcp", None, ANY, priority=1000)
    deny = Rule("egress", "tcp", (62000, 62999), ANY, allow=False, priority=900)
    assert closed_ports(srun, [allow, deny]) == [(62000, 62999)]
    late_deny = Rule("egress", "tcp", (62000, 62999), ANY, allow=False, priority=1100)
    assert closed_ports(srun, [allow, late_deny]) == []
    tie = Rule("egress", "tcp", (62000, 62999), ANY, allow=False, priority=1000)
    assert closed_ports(srun, [allow, tie]) == [(62000, 62999)]


def test_an_allow_must_hold_the_whole_peer_a_deny_need_only_touch_it() -> None:
    fanout = next(f for f in FLOWS if f.direction == "ingress" and f.peer == SUBNET)
    half = Rule("ingress", "tcp", (6818, 6818), (ip_network("10.0.8.0/25"),))
    assert closed_ports(fanout, [half]) == [(6818, 6818)]
    whole = Rule("ingress", "tcp", (6818, 6818), (ip_network("10.0.0.0/16"),), priority=10)
    one_host = Rule("ingress", "tcp", None, (ip_network("10.0.8.7/32"),), allow=False, priority=5)
    assert closed_ports(fanout, [whole]) == []
    assert closed_ports(fanout, [whole, one_host]) == [(6818, 6818)]


def test_udp_and_the_other_direction_never_match() -> None:
    ctld = by_purpose("slurmd and srun reach slurmctld")
    assert closed_ports(ctld, [Rule("egress", "udp", None, ANY), Rule("ingress", "all", None, ANY)])


def test_a_stateless_layer_needs_the_answers_way_back() -> None:
    out_only = [Rule("egress", "all", None, ANY), Rule("ingress", "tcp", (6818, 6818), ANY)]
    assert reach_check("sg", FLOWS, out_only, stateless=False, fix="f").verdict == "ok"
    acl = reach_check("acl", FLOWS, out_only, stateless=True, fix="f")
    assert acl.verdict == "fail"
    assert "slurmd and srun reach slurmctld (the answer): ingress tcp 32768-60999" in acl.detail


def test_ports_are_shown_as_slurm_writes_them() -> None:
    assert show_ports([(6817, 6817), (60001, 63000)]) == "6817,60001-63000"


def test_a_group_rule_for_a_protocol_without_ports_is_read_and_never_matches() -> None:
    from ipaddress import ip_network as net

    from provisioner.act.field_aws import _group_rules

    esp = {"IpProtocol": "50", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}  # EC2 gives no ports
    (rule,) = _group_rules([{"GroupId": "sg-1", "IpPermissions": [esp]}], {"sg-1"}, [])
    assert rule.protocol == "other" and rule.ports is None
    assert closed_ports(FLOWS[1], [rule]) == [(6818, 6818)]
    assert net("0.0.0.0/0") in rule.peers
