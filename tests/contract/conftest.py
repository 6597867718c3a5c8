"""Fixtures of the contract suites: the cloud implementations (see cloud_envs.py), with moto's
server started once per session on 127.0.0.1 and reset per test, and a GCE fake per test."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from cloud_envs import CloudEnv, aws_env, fake_env, gcp_env


def pytest_configure(config: pytest.Config) -> None:
    # google-api-core announces the end of its Python 3.11 support on import; not our concern here
    config.addinivalue_line("filterwarnings", "ignore:You are using a Python version:FutureWarning")


# ----------------------------------------------------------------------------- AWS / moto
@pytest.fixture(scope="session")
def moto_server() -> Iterator[Any]:
    from provisioner.testing.moto_faults import FaultyMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = FaultyMotoServer().start()
    yield srv
    srv.stop()


@pytest.fixture(
    params=[
        "fake",
        pytest.param("aws", marks=pytest.mark.aws),
        pytest.param("gcp", marks=pytest.mark.gcp),
    ]
)
def cloud(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[CloudEnv]:
    if request.param == "fake":
        yield fake_env()
    elif request.param == "aws":
        yield aws_env(request.getfixturevalue("moto_server"), monkeypatch)
    else:
        from provisioner.testing.fake_gce import FakeGCE

        fake = FakeGCE(op_polls_until_done=2).start()
        try:
            yield gcp_env(fake)
        finally:
            fake.stop()


@pytest.fixture
def gcp_and_fake() -> Iterator[tuple[CloudEnv, Any]]:
    """The GCP port over a GCE fake of its own, with the fake (for its switches and records)."""
    from provisioner.testing.fake_gce import FakeGCE

    fake = FakeGCE(op_polls_until_done=2).start()
    try:
        yield gcp_env(fake), fake
    finally:
        fake.stop()
