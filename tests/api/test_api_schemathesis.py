"""Schemathesis over the served OpenAPI spec: no input, valid or not, gets a 5xx, and every
answer is one the document describes: a documented status code and content type, and a body
that validates against that response's schema (the pydantic response models)."""

from __future__ import annotations

import pytest
import schemathesis
from api_helpers import make_env, seed
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.failures import FailureGroup

from provisioner.store import Store

_store = Store("sqlite://")
seed(_store)
_env = make_env(_store)
_app = _env.client.app
_headers = _env.h("admin")

schema = schemathesis.openapi.from_asgi("/openapi.json", _app)

# Explicit, so a schemathesis upgrade cannot widen them to checks this suite does not mean
# (positive_data_acceptance would call a 400 for `to` before `from` a failure).
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_answers_conform_to_the_schema(case):
    case.call_and_validate(headers=_headers, checks=CHECKS)


def test_a_body_off_its_schema_fails_the_check():
    # The conformance check must bite: the same answer against a schema that says otherwise.
    doc = _env.client.get("/openapi.json").json()
    doc["components"]["schemas"]["StatusOut"]["properties"]["version"] = {"type": "integer"}
    case = schemathesis.openapi.from_dict(doc)["/v1/status"]["GET"].Case()
    good = schema["/v1/status"]["GET"].Case()
    answer = _env.client.get("/v1/status", headers=_headers)
    good.validate_response(answer, checks=CHECKS)
    with pytest.raises(FailureGroup, match="version"):
        case.validate_response(answer, checks=CHECKS)
