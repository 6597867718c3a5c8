"""Errors become HTTP answers here, in one place (`install_error_handlers`).

- A `ProvisionerError` answers its class's `http_status` with `{"detail": err.user_message}`
  (400 InvalidArgument and ReportError, 404 NotKnown / NotFound, 409 StoreError, 422
  ConfigError / InputError, 502 CloudError, 503 SnapshotError / FencedOut, 413 BodyTooLarge,
  504 CommandTimeout). One with no status of its own answers 500 "internal error", like a
  bug. Routes raise the error; none of them maps it itself.
- A request that fails validation, and a pydantic `ValidationError` raised inside a route (a
  model built from a query), answer 422 with loc/msg/type only (`edge.validation_detail`):
  never the input, which may be huge or not even JSON (1e400).
- Anything else is a bug: 500 `{"detail": "internal error"}`, never the exception's text,
  which could carry request data. The log names the type and the route only.

`HTTPException` (auth, 404 for an unknown id, ...) keeps FastAPI's handler.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from provisioner.api import edge
from provisioner.domain.errors import ProvisionerError

log = logging.getLogger("provisioner.api")

INTERNAL_ERROR = "internal error"


async def _provisioner_error(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, ProvisionerError):  # registered for that class only
        return await _unexpected(request, exc)
    status = exc.http_status
    if status >= 500:
        log.warning(
            "%s (%d) on %s %s", type(exc).__name__, status, request.method, request.url.path
        )
    # One with no status of its own (500) is a failure nobody planned an answer for: say no
    # more than for any other bug.
    detail = INTERNAL_ERROR if status == 500 else exc.user_message
    return JSONResponse({"detail": detail}, status_code=status)


async def _request_validation(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, RequestValidationError):
        return await _unexpected(request, exc)
    return JSONResponse({"detail": edge.validation_detail(exc.errors())}, status_code=422)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, ValidationError):
        return await _unexpected(request, exc)
    errors = edge.validation_detail(exc.errors(include_input=False, include_url=False))
    return JSONResponse({"detail": errors}, status_code=422)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled %s on %s %s", type(exc).__name__, request.method, request.url.path)
    return JSONResponse({"detail": INTERNAL_ERROR}, status_code=500)


def install_error_handlers(app: FastAPI) -> None:
    """Register every exception handler the API has."""
    app.add_exception_handler(RequestValidationError, _request_validation)
    app.add_exception_handler(ProvisionerError, _provisioner_error)
    app.add_exception_handler(ValidationError, _validation_error)
    app.add_exception_handler(Exception, _unexpected)


__all__ = ["INTERNAL_ERROR", "install_error_handlers"]
