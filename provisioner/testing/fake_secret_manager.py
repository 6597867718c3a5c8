"""A narrow fake of GCP Secret Manager's `versions.access`, with the IAM check in front of it,
served by the GCE fake (provisioner/testing/fake_gce.py) on the same endpoint.

Google publishes no Secret Manager emulator. This fake answers only what a burst VM's join
program asks, in the real wire format:

* `GET /v1/projects/<p>/secrets/<s>/versions/<v>:access` (`v` a number or `latest`) returns
  `{"name": ..., "payload": {"data": <base64>, "dataCrc32c": ...}}`
  (https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets.versions/access).
* The caller is the service account whose OAuth access token it presents
  (`Authorization: Bearer ...`); a VM gets one from its metadata server
  (`instance/service-accounts/default/token`), which the GCE fake mints for the service
  account the instance runs as (`mint_token`).
* Without a token it recognises: 401 `UNAUTHENTICATED`. A caller whose service account holds no
  `roles/secretmanager.secretAccessor` on the secret: 403 `PERMISSION_DENIED`, worded as GCP
  words it, whether or not the secret exists (GCP does not tell a stranger which secrets
  exist). A permitted caller asking for a secret or version that does not exist: 404.

Simplified: IAM is one set of accessor e-mails per secret (no project-level grants, no
conditions); tokens never expire; no other Secret Manager method exists.
"""

from __future__ import annotations

import base64
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

_ACCESS = re.compile(r"/v1/(projects/[^/]+/secrets/[^/]+)/versions/([^/:]+):access")


def handles(path: str) -> bool:
    return _ACCESS.fullmatch(path) is not None


@dataclass
class FakeSecretManager:
    # "projects/<p>/secrets/<s>" -> its versions' payloads, oldest first
    versions: dict[str, list[bytes]] = field(default_factory=dict)
    # "projects/<p>/secrets/<s>" -> service-account e-mails with secretAccessor on it
    accessors: dict[str, set[str]] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)  # access token -> service account

    def add_version(self, project: str, secret: str, payload: bytes) -> None:
        self.versions.setdefault(f"projects/{project}/secrets/{secret}", []).append(payload)

    def grant_access(self, project: str, secret: str, service_account: str) -> None:
        self.accessors.setdefault(f"projects/{project}/secrets/{secret}", set()).add(
            service_account
        )

    def mint_token(self, service_account: str) -> dict[str, Any]:
        """An access token for `service_account`, as the metadata server's token endpoint
        returns it."""
        token = "ya29.fake-" + secrets.token_urlsafe(24)
        self.tokens[token] = service_account
        return {"access_token": token, "expires_in": 3599, "token_type": "Bearer"}

    def access(self, path: str, authorization: str) -> tuple[int, dict[str, Any]]:
        m = _ACCESS.fullmatch(path)
        if m is None:
            return _error(404, f"no route for {path}", "NOT_FOUND")
        secret, version = m[1], m[2]
        name = f"{secret}/versions/{version}"
        scheme, _, token = authorization.partition(" ")
        caller = self.tokens.get(token) if scheme.lower() == "bearer" else None
        if caller is None:
            return _error(
                401,
                "Request had invalid authentication credentials. Expected OAuth 2 access token.",
                "UNAUTHENTICATED",
            )
        if caller not in self.accessors.get(secret, set()):
            return _error(
                403,
                f"Permission 'secretmanager.versions.access' denied for resource '{name}' "
                "(or it may not exist).",
                "PERMISSION_DENIED",
            )
        payloads = self.versions.get(secret, [])
        n = len(payloads) if version == "latest" else int(version) if version.isdigit() else 0
        if not 1 <= n <= len(payloads):
            return _error(404, f"Secret Version [{name}] not found.", "NOT_FOUND")
        data = payloads[n - 1]
        # simplified: no `dataCrc32c` (GCP returns it only where the writer set one)
        return 200, {
            "name": f"{secret}/versions/{n}",
            "payload": {"data": base64.b64encode(data).decode()},
        }


def _error(code: int, message: str, status: str) -> tuple[int, dict[str, Any]]:
    return code, {"error": {"code": code, "message": message, "status": status}}
