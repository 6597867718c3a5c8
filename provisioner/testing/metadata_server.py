"""What the two metadata stand-ins (`imds.py` for EC2, `gce_metadata.py` for GCE) share: a
plain-text HTTP handler that answers a value, or 404 for a path the instance has no value at,
and the server bound to 169.254.169.254 inside a test host's namespace."""

from __future__ import annotations

import http.server
from typing import Any

METADATA_ADDRESS = "169.254.169.254"


class TextHandler(http.server.BaseHTTPRequestHandler):
    """Text answers, of `content_type`; `extra_headers` go on every one (GCE's
    Metadata-Flavor)."""

    content_type = "text/plain"
    extra_headers: dict[str, str] = {}  # noqa: RUF012 (a class constant, never mutated)

    def send_text(self, status: int, body: str = "") -> None:
        data = body.encode()
        self.send_response(status)
        for key, value in self.extra_headers.items():
            self.send_header(key, value)
        self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_value(self, value: str | None) -> None:
        if value is None:
            self.send_text(404, "Not Found")
        else:
            self.send_text(200, value)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(handler: type[http.server.BaseHTTPRequestHandler], bind: str, port: int) -> None:
    http.server.ThreadingHTTPServer((bind, port), handler).serve_forever()
