"""Errors become HTTP answers in one place (`provisioner.api.errors`): a ProvisionerError its
class's status and message, anything else a 500 that never echoes the exception."""

from __future__ import annotations

import logging

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel

from provisioner.account.reports import ReportError
from provisioner.api.edge import BodyTooLarge
from provisioner.api.errors import install_error_handlers
from provisioner.command_runner import CommandTimeout
from provisioner.domain.errors import (
    CapacityError,
    ConfigError,
    InputError,
    InvalidArgument,
    NotKnown,
    ProvisionerError,
    SnapshotError,
)
from provisioner.store import FencedOut, NotFound, StoreError

CASES = [
    (InvalidArgument("max_age_s must not be negative"), 400),
    (ReportError("group_by: unknown key(s) 'x'"), 400),
    (NotKnown("no price for aws/us-east-1/p5"), 404),
    (NotFound("no instance i-9"), 404),
    (StoreError("the pool is being changed"), 409),
    (BodyTooLarge(1024), 413),
    (ConfigError("policies/pools.yaml", "pools[0].max_nodes", "must be > 0"), 422),
    (InputError("trace.csv: row 3: gpus"), 422),
    (CapacityError("no capacity", code="InsufficientInstanceCapacity"), 502),
    (SnapshotError("squeue failed"), 503),
    (FencedOut("not the leader"), 503),
    (CommandTimeout(["squeue", "-h"], 5.0), 504),
]


class _Shape(BaseModel):
    n: int


def _client(exc: BaseException) -> TestClient:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/boom")
    def boom() -> None:
        raise exc

    @app.get("/model")
    def model() -> None:
        _Shape.model_validate({"n": "not a number, and secret"})

    return TestClient(app, raise_server_exceptions=False)


@pytest.mark.parametrize(("exc", "status"), CASES, ids=[type(e).__name__ for e, _ in CASES])
def test_a_provisioner_error_answers_its_status_and_message(exc, status):
    r = _client(exc).get("/boom")
    assert r.status_code == status == exc.http_status
    assert r.json() == {"detail": exc.user_message}


def test_one_with_no_status_of_its_own_says_no_more_than_a_bug():
    r = _client(ProvisionerError("something only the server should read")).get("/boom")
    assert r.status_code == 500
    assert r.json() == {"detail": "internal error"}


def test_a_report_error_keeps_its_answer_byte_for_byte():
    r = _client(ReportError("kind: unknown kind(s) 'x'")).get("/boom")
    assert r.status_code == 400
    assert r.content == b'{"detail":"kind: unknown kind(s) \'x\'"}'
    assert r.headers["content-type"] == "application/json"


def test_anything_else_is_a_500_that_never_echoes_the_exception(caplog):
    caplog.set_level(logging.DEBUG)
    r = _client(RuntimeError("token pbt_secret in a message")).get("/boom")
    assert r.status_code == 500
    assert r.content == b'{"detail":"internal error"}'
    assert "pbt_secret" not in caplog.text
    assert "RuntimeError" in caplog.text and "/boom" in caplog.text


def test_a_validation_error_inside_a_route_is_422_without_the_input():
    r = _client(RuntimeError()).get("/model")
    assert r.status_code == 422
    assert r.json() == {
        "detail": [
            {
                "loc": ["n"],
                "msg": "Input should be a valid integer, unable to parse string as an integer",
                "type": "int_parsing",
            }
        ]
    }
    assert "secret" not in r.text


def test_body_too_large_is_a_provisioner_error():
    assert issubclass(BodyTooLarge, ProvisionerError)
    assert BodyTooLarge(10).http_status == 413
    assert BodyTooLarge(10).user_message == "request body over 10 bytes"
