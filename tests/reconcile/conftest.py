"""moto's server (one per session, reset per test) for the reconcile tests; nothing sleeps."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def moto_server() -> Iterator[Any]:
    from provisioner.testing.moto_faults import FaultyMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = FaultyMotoServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def moto(moto_server: Any) -> Iterator[Any]:
    """moto reset, on the wall clock unless a test points it at its own (`use_clock`)."""
    moto_server.reset()
    yield moto_server
    moto_server.use_clock(None)
