"""Fixtures for the controller-side NVML tests: a fresh SQLite store per test."""

from __future__ import annotations

import pytest

from provisioner.store import Store


@pytest.fixture
def store(tmp_path):
    s = Store(f"sqlite:///{tmp_path / 'ctl.sqlite'}")
    yield s
    s.close()
