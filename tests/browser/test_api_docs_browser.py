"""Issue 25 item 3 in a real browser: `/docs` renders Swagger UI from the vendored files under
its Content-Security-Policy, every request the page makes stays on the API's own address, and
the browser reports no error (a CSP violation or a missing asset would be one)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.browser.conftest import STARTUP_S, WAIT_MS

pytestmark = pytest.mark.browser


@pytest.fixture
def api_url() -> Iterator[str]:
    from provisioner.api.app import ApiDeps, create_app
    from provisioner.bootstrap import ApiServer
    from provisioner.clock import SystemClock
    from provisioner.store import Store

    store = Store("sqlite://")
    server = ApiServer(create_app(ApiDeps(store=store, clock=SystemClock())), "127.0.0.1", 0)
    port = server.start(timeout_s=STARTUP_S)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
        store.close()


def test_docs_render_offline_from_local_assets_without_errors(browser: Any, api_url: str):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    errors: list[str] = []
    requested: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requested.append(r.url))
    try:
        page.goto(f"{api_url}/docs", wait_until="load")
        page.wait_for_selector(".swagger-ui .opblock")
        assert page.locator(".swagger-ui .opblock").count() > 20
        assert page.locator(".swagger-ui .btn.authorize").count() == 1  # the bearer scheme
        assert "GPU burst provisioner" in page.locator(".swagger-ui .title").inner_text()
    finally:
        context.close()
    own = urlsplit(api_url).netloc
    assert {urlsplit(u).netloc for u in requested} == {own}, requested
    assert f"{api_url}/openapi.json" in requested
    assert errors == []
