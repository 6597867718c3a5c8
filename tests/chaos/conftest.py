"""Fixtures of the live chaos soak: the live Slurm cluster of tests/slurm and moto's server."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slurm"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from slurm_harness import cluster, slurm_cluster

__all__ = ["cluster", "moto_server", "slurm_cluster"]


@pytest.fixture(scope="module")
def moto_server() -> Iterator[Any]:
    from provisioner.testing.moto_faults import FaultyMotoServer

    srv = FaultyMotoServer().start()
    yield srv
    srv.stop()
