from __future__ import annotations

import pytest

from provisioner.reconcile.store import Store


@pytest.fixture
def store(tmp_path):
    s = Store(f"sqlite:///{tmp_path / 'acct.sqlite'}")
    yield s
    s.close()
