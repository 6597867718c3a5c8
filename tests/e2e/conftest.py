"""Fixtures of the end-to-end tests: the live Slurm cluster of tests/slurm (scripts/slurm-up.sh,
reset around each test) and moto's server on 127.0.0.1."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slurm"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "account"))  # focus_check

from slurm_harness import cluster, slurm_cluster

__all__ = ["cluster", "moto", "slurm_cluster"]


@pytest.fixture(scope="session")
def moto_server_e2e() -> Iterator[Any]:
    from provisioner.testing.moto_faults import FaultyMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = FaultyMotoServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def moto(moto_server_e2e: Any) -> Any:
    moto_server_e2e.reset()
    return moto_server_e2e
