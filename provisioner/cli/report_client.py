"""Reading the provisioner's HTTP API with a token, for the report commands."""

from __future__ import annotations

from typing import Any

import httpx

from provisioner.domain.errors import InputError, ProvisionerError


class ApiError(ProvisionerError):
    pass


def get_json(url: str, token: str, path: str, params: dict[str, Any]) -> Any:
    """GET `path` from the API at `url` with a bearer token; clear errors on every failure."""
    if not token:
        raise InputError("--token: an API token is needed (or set PROVISIONER_TOKEN)")
    if not url.startswith(("http://", "https://")):
        raise InputError(f"--url: {url!r} is not an http(s) URL")
    clean = {k: v for k, v in params.items() if v not in (None, "")}
    try:
        r = httpx.get(
            url.rstrip("/") + path,
            params=clean,
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )
    except httpx.HTTPError as exc:
        raise ApiError(f"GET {url.rstrip('/')}{path}: {exc}") from exc
    if r.status_code != 200:
        try:
            detail = r.json().get("detail", r.text)
        except ValueError:
            detail = r.text
        raise ApiError(f"GET {path}: HTTP {r.status_code}: {detail}")
    return r.json()
