"""`POST /v1/nodes/{node}/warnings` against a real munged: a burst node's signed spot warning
is taken once and wakes the loop; a forged, replayed, unprivileged or misdirected one is
refused with the reason, and nothing is held."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from provisioner.api.app import ApiDeps, create_app
from provisioner.clock import ManualClock
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.domain.spot_warnings import WarningKind
from provisioner.observe.munge_credentials import MungeDecoder
from provisioner.observe.spot_inbox import SpotInbox
from provisioner.store import Store
from provisioner.testing.munge_daemon import credential, private_munged

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
OFFER = OfferKey("aws", "us-east-1", "g5.48xlarge", CapacityType.SPOT)


@dataclass
class World:
    client: TestClient
    inbox: SpotInbox
    sock: str
    woken: list[int]


@pytest.fixture
def world(tmp_path: Path, munged: str) -> Iterator[World]:
    store = Store(f"sqlite:///{tmp_path / 'c.sqlite'}")
    for iid, node, state in (
        ("i-1", "cloud-aws-1", InstanceState.READY),
        ("i-2", "cloud-aws-2", InstanceState.READY),
        ("i-9", "cloud-aws-9", InstanceState.TERMINATED),
    ):
        store.add_instance(
            CloudInstance(
                iid, "aws", OFFER, "A10G", 8, Decimal("16.29"), state,
                NOW.timestamp() - 600, node_name=node,
            )
        )  # fmt: skip
    inbox = SpotInbox()
    woken: list[int] = []
    inbox.on_post(lambda: woken.append(1))
    deps = ApiDeps(
        store=store, clock=ManualClock(NOW), spot_inbox=inbox, munge=MungeDecoder(munged)
    )
    with TestClient(create_app(deps)) as client:
        yield World(client, inbox, munged, woken)
    store.close()


def report(node: str = "cloud-aws-1", iid: str = "i-1", **extra: str) -> str:
    return json.dumps({"node": node, "instance_id": iid, "kind": "interruption", **extra})


def post(w: World, cred: str, node: str = "cloud-aws-1") -> tuple[int, dict[str, object]]:
    r = w.client.post(f"/v1/nodes/{node}/warnings", json={"credential": cred})
    return r.status_code, r.json()


def test_a_signed_notice_is_held_once_and_wakes_the_loop(world: World) -> None:
    notice = report(action_time="2026-12-05T12:02:00Z")
    code, body = post(world, credential(world.sock, notice))
    assert code == 202, body
    assert body == {
        "node": "cloud-aws-1",
        "instance_id": "i-1",
        "kind": "interruption",
        "new": True,
        "deadline": "2026-12-05T12:02:00Z",
    }
    # the watcher sends it again (a new credential): not held twice, but the loop wakes again
    code, body = post(world, credential(world.sock, notice))
    assert (code, body["new"]) == (202, False)
    assert len(world.woken) == 2
    (held,) = world.inbox.held()["i-1"]
    assert (held.kind, held.action_ts) == (WarningKind.INTERRUPTION, NOW.timestamp() + 120)
    assert held.noticed_ts == NOW.timestamp() and held.source == "testclient"


def test_a_replayed_credential_is_refused(world: World) -> None:
    cred = credential(world.sock, report())
    assert post(world, cred)[0] == 202
    code, body = post(world, cred)
    assert code == 403 and "replayed" in str(body["detail"])


def test_a_credential_made_with_another_key_is_refused(world: World) -> None:
    with private_munged() as other:
        code, body = post(world, credential(other, report()))
    assert code == 403 and "rejected" in str(body["detail"])
    assert world.inbox.held() == {} and world.woken == []


def test_a_credential_not_made_by_root_is_refused(world: World) -> None:
    code, body = post(world, credential(world.sock, report(), as_user="nobody"))
    assert code == 403 and "not root" in str(body["detail"])


@pytest.mark.parametrize(
    ("path_node", "payload", "why"),
    [
        ("cloud-aws-2", report(), "speaks for node 'cloud-aws-1'"),  # another node's path
        ("cloud-aws-1", report(iid="i-2"), "i-2 is bound to cloud-aws-2"),  # another's VM
        ("cloud-aws-9", report("cloud-aws-9", "i-9"), "no live instance"),  # ended
        ("cloud-aws-1", report(iid="i-404"), "no live instance"),  # never ours
    ],
)
def test_a_report_for_a_node_or_instance_it_does_not_hold_is_refused(
    world: World, path_node: str, payload: str, why: str
) -> None:
    code, body = post(world, credential(world.sock, payload), node=path_node)
    assert code == 403 and why in str(body["detail"]), body
    assert world.inbox.held() == {}


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ('{"node": "cloud-aws-1", "instance_id": "i-1", "kind": "meteor"}', "'kind'"),
        ('{"node": "cloud-aws-1", "kind": "interruption"}', "'instance_id'"),
        (report(action_time="tomorrow"), "'action_time'"),
        ("not json", "not JSON"),
    ],
)
def test_a_malformed_report_is_a_400_naming_the_field(
    world: World, payload: str, field: str
) -> None:
    code, body = post(world, credential(world.sock, payload))
    assert code == 400 and field in json.dumps(body), body


def test_something_that_is_no_credential_is_refused(world: World) -> None:
    code, body = post(world, "MUNGE:garbage:")
    assert code == 403 and "rejected" in str(body["detail"])
    code, body = post(world, "hello")
    assert code == 403 and "not a MUNGE credential" in str(body["detail"])


def test_a_controller_without_munge_takes_no_warnings(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'c.sqlite'}")
    with TestClient(create_app(ApiDeps(store=store, clock=ManualClock(NOW)))) as client:
        r = client.post("/v1/nodes/n/warnings", json={"credential": "MUNGE:x:"})
    assert r.status_code == 503
    store.close()
