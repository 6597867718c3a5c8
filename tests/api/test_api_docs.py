"""Issue 25 item 3: the interactive API docs at `/docs`, where docs/console.md and docs/api.md
point, served offline: Swagger UI from the files vendored in the console's static folder, never
from a CDN, with a CSP that allows only this server. Public, like `/openapi.json`.
The same page in Chromium: tests/browser/test_api_docs_browser.py."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from provisioner.api.app import (
    SWAGGER_UI_CSS,
    SWAGGER_UI_JS,
    SWAGGER_UI_VERSION,
    ApiDeps,
    create_app,
)
from provisioner.clock import SystemClock
from provisioner.store import Store

VENDOR = Path(__file__).resolve().parents[2] / "provisioner/api/console/static/vendor"


@pytest.fixture(scope="module")
def client():
    store = Store("sqlite://")
    with TestClient(create_app(ApiDeps(store=store, clock=SystemClock()))) as c:
        yield c
    store.close()


def test_docs_answer_200_without_a_token(client):
    r = client.get("/docs")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert "SwaggerUIBundle(" in r.text and "'/openapi.json'" in r.text
    assert "/docs" not in client.get("/openapi.json").json()["paths"]


def test_docs_reference_only_local_assets_and_each_is_served(client):
    page = client.get("/docs").text
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", page)
    assert SWAGGER_UI_JS in refs and SWAGGER_UI_CSS in refs
    for ref in refs:
        parts = urlsplit(ref)
        assert not parts.scheme and not parts.netloc and ref.startswith("/static/"), ref
        asset = client.get(ref)
        assert asset.status_code == 200 and len(asset.content) > 0, ref
    # No address off this server anywhere in the page (FastAPI's defaults name a CDN and
    # fastapi.tiangolo.com; Swagger UI's validator badge calls validator.swagger.io).
    assert not re.search(r"https?://|//cdn|jsdelivr|unpkg", page), page
    assert '"validatorUrl": null' in page


def test_docs_csp_allows_this_server_and_the_one_inline_script_only(client):
    r = client.get("/docs")
    directives = (d.partition(" ") for d in r.headers["content-security-policy"].split("; "))
    csp = {name: value for name, _, value in directives}
    assert csp["default-src"] == "'none'"
    assert csp["connect-src"] == "'self'" and csp["frame-ancestors"] == "'none'"
    (inline,) = re.findall(r"<script>(.*?)</script>", r.text, re.S)
    digest = base64.b64encode(hashlib.sha256(inline.encode()).digest()).decode()
    assert csp["script-src"] == f"'self' 'sha256-{digest}'"
    assert "http" not in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"


def test_the_vendored_swagger_ui_carries_its_licence_and_version():
    v = SWAGGER_UI_VERSION
    for name in (
        f"swagger-ui-bundle-{v}.js",
        f"swagger-ui-{v}.css",
        f"swagger-ui-{v}.LICENSE",
        f"swagger-ui-{v}.NOTICE",
        f"swagger-ui-bundle-{v}.js.LICENSE.txt",
    ):
        assert (VENDOR / name).is_file(), name
    assert "Apache License" in (VENDOR / f"swagger-ui-{v}.LICENSE").read_text()
    assert f'PACKAGE_VERSION:"{v}"' in (VENDOR / f"swagger-ui-bundle-{v}.js").read_text()
