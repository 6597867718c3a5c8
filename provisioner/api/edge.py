"""Limits at the HTTP edge, before any route runs: a maximum body size, and validation errors
rendered without echoing the input (an input such as 1e400 is not JSON, and a 50 MB string
has no business in a response)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from provisioner.domain.errors import ProvisionerError

DEFAULT_MAX_BODY_BYTES = 1 << 20  # 1 MiB: a 64-GPU telemetry payload is about 60 KB


class BodyTooLarge(ProvisionerError):
    """A request body past the limit. Normally answered by `MaxBodySize` itself; should a route
    see it first, `api/errors.py` gives the same 413 and message."""

    http_status = 413

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"request body over {limit} bytes")


class MaxBodySize:
    """ASGI middleware: 413 for a body over `limit` bytes, whether declared in Content-Length
    or streamed (chunked) past it; the body is never read beyond the limit."""

    def __init__(self, app: ASGIApp, limit: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._too_large(send)
            return
        seen = 0
        started = False

        async def limited() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge(self.limit)
            return msg

        async def tracking(msg: Message) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await self.app(scope, limited, tracking)
        except BodyTooLarge:
            if not started:
                await self._too_large(send)

    async def _too_large(self, send: Send) -> None:
        detail = {"detail": BodyTooLarge(self.limit).user_message}
        body = json.dumps(detail, separators=(",", ":")).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def validation_detail(errors: Any) -> list[dict[str, Any]]:
    """Pydantic errors as loc/msg/type only: never the input, never a context value."""
    out: list[dict[str, Any]] = []
    for e in errors:
        loc = [x if isinstance(x, int | str) else str(x) for x in e.get("loc", ())]
        out.append({"loc": loc, "msg": str(e.get("msg", ""))[:500], "type": str(e.get("type", ""))})
    return out


def install(app: FastAPI, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
    """The body limit. Validation errors are answered by `api/errors.py`, with the others."""
    app.add_middleware(MaxBodySize, limit=max_body_bytes)


__all__ = ["DEFAULT_MAX_BODY_BYTES", "BodyTooLarge", "MaxBodySize", "install", "validation_detail"]
