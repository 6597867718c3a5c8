"""Schemathesis over the served OpenAPI spec: no input, valid or not, gets a 5xx."""

from __future__ import annotations

import pytest
import schemathesis
from api_helpers import make_env, seed
from hypothesis import HealthCheck, settings

from provisioner.store import Store

_store = Store("sqlite://")
seed(_store)
_env = make_env(_store)
_app = _env.client.app
_headers = _env.h("admin")

schema = schemathesis.openapi.from_asgi("/openapi.json", _app)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_no_server_errors(case):
    response = case.call(headers=_headers)
    assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.text}"
