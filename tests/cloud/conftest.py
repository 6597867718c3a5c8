"""Fixtures for the cloud tests: moto's server (one per session, reset per test), the fake GCE API
(one per test), Pulumi mocks. Everything binds 127.0.0.1; nothing sleeps."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from cloud_helpers import AwsEnv, GcpEnv, fast_retrying

from provisioner.testing.moto_faults import use_test_credentials


def pytest_configure(config: pytest.Config) -> None:
    # google-api-core announces the end of its Python 3.11 support on import; not our concern here
    config.addinivalue_line("filterwarnings", "ignore:You are using a Python version:FutureWarning")


# ----------------------------------------------------------------------------- AWS / moto
@pytest.fixture(scope="session")
def moto_server() -> Iterator[Any]:
    from provisioner.testing.moto_faults import FaultyMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = FaultyMotoServer().start()
    import boto3

    # Pay moto's EC2 backend initialisation (2-3 s) once per session.
    boto3.client(
        "ec2",
        endpoint_url=srv.endpoint,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
    ).describe_regions()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def aws_clients(moto_server: Any) -> Any:
    """Clients are stateless; building them (botocore loads service models) costs ~0.3 s each."""
    from provisioner.act.aws import AwsClients

    return AwsClients(moto_server.endpoint)


@pytest.fixture
def aws(moto_server: Any, aws_clients: Any, monkeypatch: pytest.MonkeyPatch) -> AwsEnv:
    from provisioner.act.aws import AwsCapacity, AwsPoolDriver

    moto_server.reset()
    use_test_credentials(monkeypatch)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server.endpoint)
    clients = aws_clients
    retrying = fast_retrying()
    return AwsEnv(
        moto_server,
        clients,
        AwsPoolDriver(clients, retrying),
        AwsCapacity(["us-east-1"], clients, retrying),
    )


# ----------------------------------------------------------------------------- GCP / fake
@pytest.fixture
def gce() -> Iterator[GcpEnv]:
    from google.auth.credentials import AnonymousCredentials

    from provisioner.act.gcp import GcpCapacity, GcpClients, GcpPoolDriver
    from provisioner.testing.fake_gce import FakeGCE

    fake = FakeGCE(op_polls_until_done=2).start()
    clients = GcpClients("burst-proj", fake.endpoint, credentials=AnonymousCredentials())
    retrying = fast_retrying()
    yield GcpEnv(fake, clients, GcpPoolDriver(clients, retrying), GcpCapacity(clients, retrying))
    fake.stop()


# ----------------------------------------------------------------------------- Pulumi
@pytest.fixture
def pulumi_mocks() -> Any:
    import pulumi
    from pulumi.runtime.mocks import MockMonitor

    class Mocks(pulumi.runtime.Mocks):
        """Records every registration; fabricates the outputs the programs read."""

        def __init__(self) -> None:
            self.created: list[Any] = []
            self.ignore_changes: dict[str, list[str]] = {}

        def new_resource(self, args: Any) -> tuple[str, dict[str, Any]]:
            self.created.append(args)
            out = dict(args.inputs)
            if args.typ == "gcp:compute/instanceTemplate:InstanceTemplate":
                link = f"https://fake/projects/p/global/instanceTemplates/{args.inputs['name']}"
                out["selfLink"] = link
                out["selfLinkUnique"] = f"{link}?uniqueId=42"
            return f"{args.name}-id", out

        def call(self, args: Any) -> dict[str, Any]:
            return {}

        def by_type(self, typ: str) -> list[Any]:
            return [a for a in self.created if a.typ == typ]

    mocks = Mocks()

    class RecordingMonitor(MockMonitor):  # type: ignore[misc]
        """Also records resource options the mock args do not carry (ignoreChanges)."""

        def RegisterResource(self, request: Any) -> Any:
            mocks.ignore_changes[request.name] = list(request.ignoreChanges)
            return super().RegisterResource(request)

    pulumi.runtime.set_mocks(
        mocks,
        project="gpu-burst-pools",
        stack="unit",
        preview=False,
        monitor=RecordingMonitor(mocks),
    )
    return mocks
