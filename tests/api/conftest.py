from __future__ import annotations

import pytest
from api_helpers import make_env, seed

from provisioner.reconcile.store import Store


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('api') / 'api.sqlite'}")
    seed(store)
    e = make_env(store)
    yield e
    e.client.close()
    store.close()


@pytest.fixture
def fresh(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'fresh.sqlite'}")
    seed(store)
    e = make_env(store)
    yield e
    e.client.close()
    store.close()
