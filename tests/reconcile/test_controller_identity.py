"""Which instances a controller owns is decided by its identity (the `controller` tag). With no
controller named in policy, each installation claims one of its own in its store: two
installations in one AWS account (moto's server) never take each other's VMs for their own, an
HA pair (one store) shares one, and an installation from before identities were kept
(`burst-ctl`) keeps owning the VMs it runs. What each owns is read from moto's own records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from reconcile_world import POOL, aws_client, make_controller, make_fake, policy, start_clock

from provisioner.bootstrap import LEGACY_CONTROLLER
from provisioner.config.loader import policy_from_mapping
from provisioner.config.models import Policy
from provisioner.domain.instances import InstanceOrigin

pytestmark = pytest.mark.aws


def unnamed(base: Policy) -> Policy:
    """The test policy with no controller named (as the shipped policy leaves it)."""
    data = base.model_dump(mode="json", exclude={"controller"}, exclude_unset=True)
    return policy_from_mapping(data, "test policy, no controller named")


def named(base: Policy, controller: str) -> Policy:
    data = base.model_dump(mode="json", exclude_unset=True) | {"controller": controller}
    return policy_from_mapping(data, f"test policy, controller {controller}")


def tagged(endpoint: str) -> dict[str, str]:
    """moto's live instances: id -> their controller tag."""
    ec2 = aws_client("ec2", endpoint)
    flt = [{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    out: dict[str, str] = {}
    for res in ec2.describe_instances(Filters=flt)["Reservations"]:
        for inst in res["Instances"]:
            tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
            out[inst["InstanceId"]] = tags.get("controller", "")
    return out


def test_two_installations_in_one_account_own_only_their_own(tmp_path: Path, moto: Any) -> None:
    clock = start_clock()
    t0 = clock.now().timestamp()
    pol = unnamed(policy())
    a = make_controller(
        f"sqlite:///{tmp_path}/a.sqlite", clock, make_fake(clock, t0), moto.endpoint, pol=pol
    )
    b = make_controller(
        f"sqlite:///{tmp_path}/b.sqlite", clock, make_fake(clock, t0), moto.endpoint, pol=pol
    )
    ida, idb = a.policy.controller, b.policy.controller
    assert ida != idb and ida.startswith("burst-") and ida != LEGACY_CONTROLLER
    a.reconciler.run_pass()
    b.reconciler.run_pass()
    owners = tagged(moto.endpoint)
    assert sorted(owners.values()) == sorted([ida, idb])  # one burst node each
    for c in (a, b):
        mine = {si.instance.instance_id for si in c.store.instances(live_only=True)}
        assert mine == {i for i, owner in owners.items() if owner == c.policy.controller}
    # passes later: neither adopts, sweeps or ends the other's instance
    for _ in range(3):
        clock.advance(60)
        a.reconciler.run_pass()
        b.reconciler.run_pass()
    assert sorted(tagged(moto.endpoint).values()) == sorted([ida, idb])
    assert not [
        si
        for si in a.store.instances(live_only=False)
        if si.instance.origin is InstanceOrigin.ORPHAN
    ]


def test_an_ha_pair_shares_one_identity(tmp_path: Path, moto: Any) -> None:
    clock = start_clock()
    t0 = clock.now().timestamp()
    url = f"sqlite:///{tmp_path}/pair.sqlite"
    pol = unnamed(policy())
    first = make_controller(url, clock, make_fake(clock, t0), moto.endpoint, pol=pol)
    second = make_controller(url, clock, make_fake(clock, t0), moto.endpoint, pol=pol)
    assert first.policy.controller == second.policy.controller != LEGACY_CONTROLLER


def test_an_installation_from_before_identities_keeps_its_running_vms(
    tmp_path: Path, moto: Any
) -> None:
    clock = start_clock()
    t0 = clock.now().timestamp()
    url = f"sqlite:///{tmp_path}/old.sqlite"
    fake = make_fake(clock, t0)
    old = make_controller(url, clock, fake, moto.endpoint, pol=named(policy(), LEGACY_CONTROLLER))
    old.reconciler.run_pass()  # the older version: the shared default, named
    (vm,) = tagged(moto.endpoint)
    # upgraded: the new policy names no controller, the store holds the old one's work
    new = make_controller(url, clock, fake, moto.endpoint, pol=unnamed(policy()))
    assert new.policy.controller == LEGACY_CONTROLLER
    for _ in range(4):
        clock.advance(60)
        new.reconciler.run_pass()
    assert vm in tagged(moto.endpoint)  # still running, still its own
    (si,) = [s for s in new.store.instances(live_only=False) if s.instance.instance_id == vm]
    assert si.instance.pool == POOL and si.instance.origin is not InstanceOrigin.ORPHAN
    assert not si.instance.state.terminal
