"""`POST /v1/nodes/{node}/agent-token` against a real munged: a burst node proves itself with a
MUNGE credential and gets an agent token bound to its node, which its instance's end revokes.
A forged, replayed, unprivileged, misdirected or misaddressed request gets no token."""

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
from provisioner.api.auth import Role, create_token, verify_token
from provisioner.clock import ManualClock
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.nodes import Node, NodeKind, NodeState
from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.observe.munge_credentials import MungeDecoder
from provisioner.reconcile.agent_tokens import revoke_ended
from provisioner.store import Store
from provisioner.testing.munge_daemon import credential, private_munged

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
OFFER = OfferKey("aws", "us-east-1", "g5.48xlarge", CapacityType.SPOT)
CLIENT = "testclient"  # the address the test client's requests come from


@dataclass
class World:
    client: TestClient
    store: Store
    sock: str
    nodes: dict[str, str]  # node -> Slurm's NodeAddr for it


@pytest.fixture
def world(tmp_path: Path, munged: str) -> Iterator[World]:
    store = Store(f"sqlite:///{tmp_path / 'c.sqlite'}")
    for iid, node, state in (
        ("i-1", "cloud-aws-1", InstanceState.READY),
        ("i-2", "cloud-aws-2", InstanceState.JOINING),
        ("i-9", "cloud-aws-9", InstanceState.TERMINATED),
    ):
        store.add_instance(
            CloudInstance(
                iid, "aws", OFFER, "A10G", 8, Decimal("16.29"), state,
                NOW.timestamp() - 600, node_name=node,
            )
        )  # fmt: skip
    nodes = {"cloud-aws-1": CLIENT, "cloud-aws-2": "10.77.0.9", "cloud-aws-9": CLIENT}

    def snapshot() -> ClusterSnapshot:
        return ClusterSnapshot(
            taken_ts=NOW.timestamp(),
            nodes=tuple(
                Node(n, NodeKind.BURST, 8, state=NodeState.IDLE, address=a)
                for n, a in nodes.items()
            ),
        )

    deps = ApiDeps(
        store=store, clock=ManualClock(NOW), munge=MungeDecoder(munged), snapshot=snapshot
    )
    with TestClient(create_app(deps)) as client:
        yield World(client, store, munged, nodes)
    store.close()


def ask(node: str = "cloud-aws-1", iid: str = "i-1", **over: object) -> str:
    return json.dumps({"node": node, "instance_id": iid, "purpose": "agent-token", **over})


def post(w: World, cred: str, node: str = "cloud-aws-1") -> tuple[int, dict[str, object]]:
    r = w.client.post(f"/v1/nodes/{node}/agent-token", json={"credential": cred})
    return r.status_code, r.json()


def test_a_node_gets_an_agent_token_bound_to_it_and_asking_again_replaces_it(
    world: World,
) -> None:
    code, body = post(world, credential(world.sock, ask()))
    assert code == 201, body
    assert (body["node"], body["instance_id"]) == ("cloud-aws-1", "i-1")
    first = str(body["token"])
    who = verify_token(world.store, first, NOW.timestamp())
    assert who is not None and who.role is Role.AGENT and who.node == "cloud-aws-1"
    assert body["expires"] == "2026-12-12T12:00:00Z"  # a week, unless the instance ends first
    code, body = post(world, credential(world.sock, ask()))
    assert code == 201
    assert verify_token(world.store, first, NOW.timestamp()) is None  # replaced
    assert verify_token(world.store, str(body["token"]), NOW.timestamp()) is not None


def test_the_instances_end_revokes_its_token_and_no_other(world: World) -> None:
    _, body = post(world, credential(world.sock, ask()))
    token = str(body["token"])
    operators = create_token(world.store, Role.AGENT, "gpu-01 agent", 0.0, node="gpu-01")
    later = NOW.timestamp() + 60
    assert revoke_ended(world.store, later) == []  # i-1 still runs
    world.store.transition("i-1", InstanceState.TERMINATING, later, "drained")
    assert revoke_ended(world.store, later) == []  # terminating is not ended yet
    world.store.transition("i-1", InstanceState.TERMINATED, later, "gone")
    assert revoke_ended(world.store, later) == ["i-1"]
    assert verify_token(world.store, token, later) is None
    assert verify_token(world.store, operators, later) is not None  # an on-prem node's own


def test_a_replayed_or_foreign_or_unprivileged_credential_gets_no_token(world: World) -> None:
    cred = credential(world.sock, ask())
    assert post(world, cred)[0] == 201
    code, body = post(world, cred)
    assert code == 403 and "replayed" in str(body["detail"])
    with private_munged() as other:
        code, body = post(world, credential(other, ask()))
    assert code == 403 and "rejected" in str(body["detail"])
    code, body = post(world, credential(world.sock, ask(), as_user="nobody"))
    assert code == 403 and "not root" in str(body["detail"])


@pytest.mark.parametrize(
    ("path_node", "payload", "code", "why"),
    [
        ("cloud-aws-2", ask(), 403, "speaks for node 'cloud-aws-1'"),  # another node's path
        ("cloud-aws-1", ask(iid="i-2"), 403, "i-2 is bound to cloud-aws-2"),  # another's VM
        ("cloud-aws-9", ask("cloud-aws-9", "i-9"), 403, "no live instance"),  # ended
        ("cloud-aws-2", ask("cloud-aws-2", "i-2"), 403, "not cloud-aws-2's address"),
        ("cloud-aws-1", ask(purpose="warning"), 400, "payload.purpose"),  # made for another use
        ("cloud-aws-1", ask(node=""), 400, "payload.node"),
        ("cloud-aws-1", "not json", 400, "not JSON"),
    ],
)
def test_a_request_that_is_not_the_nodes_own_gets_no_token(
    world: World, path_node: str, payload: str, code: int, why: str
) -> None:
    got, body = post(world, credential(world.sock, payload), node=path_node)
    assert (got, why in str(body["detail"])) == (code, True), body
    assert not [t for t in world.store.tokens() if t.node]  # nothing issued


def test_a_controller_without_munge_issues_no_agent_tokens(world: World, tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'n.sqlite'}")
    with TestClient(create_app(ApiDeps(store=store, clock=ManualClock(NOW)))) as client:
        r = client.post("/v1/nodes/cloud-aws-1/agent-token", json={"credential": "MUNGE:x"})
    assert r.status_code == 503 and "no munged" in r.json()["detail"]
    store.close()
