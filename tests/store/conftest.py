from __future__ import annotations

import pytest

from provisioner.reconcile.store import Store


@pytest.fixture
def db_url(tmp_path):
    return f"sqlite:///{tmp_path / 'store.sqlite'}"


@pytest.fixture
def store(db_url):
    s = Store(db_url)
    yield s
    s.close()
