"""A narrow fake of the IAM Service Account Credentials API's `generateAccessToken`, served by the
GCE fake (provisioner/testing/fake_gce.py) on the same endpoint, so that a test can impersonate a
VM's service account as the controller's field preflight does:

* `POST /v1/projects/-/serviceAccounts/<email>:generateAccessToken` with `{"scope": [...]}`
  returns `{"accessToken": ..., "expireTime": ...}`
  (https://cloud.google.com/iam/docs/reference/credentials/rest/v1/projects.serviceAccounts/generateAccessToken).
  The token is minted by the fake Secret Manager (`mint_token`), which then takes it as that
  service account's.
* An account that does not exist: 404 NOT_FOUND. One the caller may not impersonate: 403
  PERMISSION_DENIED, worded as GCP words it. No scope: 400 INVALID_ARGUMENT.

Simplified: the caller is not authenticated; who may impersonate is one set of accounts
(`impersonable`: those on which the controller holds roles/iam.serviceAccountTokenCreator), not
a policy per caller; `lifetime`, `delegates` and uniqueId names are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

_GENERATE = re.compile(r"/v1/projects/-/serviceAccounts/([^/:]+):generateAccessToken")


def handles(path: str) -> bool:
    return _GENERATE.fullmatch(path) is not None


def _wall() -> datetime:
    return datetime.now(UTC)


@dataclass
class FakeIamCredentials:
    mint: Callable[[str], dict[str, Any]]  # service account -> a metadata-server token answer
    clock: Callable[[], datetime] = _wall
    service_accounts: set[str] = field(default_factory=set)
    impersonable: set[str] = field(default_factory=set)

    def add_service_account(self, email: str, *, impersonable: bool = True) -> None:
        self.service_accounts.add(email)
        if impersonable:
            self.impersonable.add(email)

    def generate_access_token(self, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        m = _GENERATE.fullmatch(path)
        if m is None:
            return _error(404, f"no route for {path}", "NOT_FOUND")
        email = m[1]
        if not (body or {}).get("scope"):
            return _error(400, "Scope required.", "INVALID_ARGUMENT")
        if email not in self.service_accounts:
            return _error(404, f"Not found; Gaia id not found for email {email}", "NOT_FOUND")
        if email not in self.impersonable:
            return _error(
                403,
                "Permission 'iam.serviceAccounts.getAccessToken' denied on resource "
                "(or it may not exist).",
                "PERMISSION_DENIED",
            )
        minted = self.mint(email)
        expire = self.clock() + timedelta(seconds=int(minted["expires_in"]))
        return 200, {
            "accessToken": minted["access_token"],
            "expireTime": expire.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }


def _error(code: int, message: str, status: str) -> tuple[int, dict[str, Any]]:
    return code, {"error": {"code": code, "message": message, "status": status}}
