"""GCP's field preflight, the VM's identity (act/field_gcp.py runs it): the pool's service account
exists and may read the munge key's secret. The controller impersonates the account (IAM
Credentials `generateAccessToken`, with its own credentials) and reads the secret's latest
version with that token, as the VM will. Where the controller may not impersonate it, that is a
warning: nothing is proved either way. The secret's value is never logged or returned: only its
length.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from typing import Any

import requests

from provisioner.act.userdata import SECRET_MANAGER
from provisioner.config.models import NodeBootstrap, PoolPolicy
from provisioner.domain.checks import Check

IAM_CREDENTIALS = "https://iamcredentials.googleapis.com"
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
TIMEOUT_S = 30


def controller_session(credentials: Any, iam_endpoint: str) -> Any:
    """An HTTP session with the controller's credentials (those the Compute clients use: given,
    or Application Default Credentials against Google's own endpoint; none against a stand-in)."""
    import google.auth
    import google.auth.credentials
    from google.auth.transport.requests import AuthorizedSession

    if credentials is None and iam_endpoint == IAM_CREDENTIALS:
        credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM])
    if credentials is None:
        return requests.Session()
    scoped = google.auth.credentials.with_scopes_if_required(  # type: ignore[no-untyped-call]
        credentials, [CLOUD_PLATFORM]
    )
    return AuthorizedSession(scoped)  # type: ignore[no-untyped-call]


def account_and_secret(
    pool: PoolPolicy,
    node: NodeBootstrap,
    project: str,
    session: Callable[[], Any],
    iam_endpoint: str = IAM_CREDENTIALS,
) -> list[Check]:
    """The service account's check and, where a munge key secret is set, the secret's."""
    account = pool.service_account
    if not account:
        return []
    secret = node.munge_key_secret
    if secret and not secret.startswith("projects/"):
        secret = f"projects/{project}/secrets/{secret}"
    token, check = _impersonate(pool.name, account, project, secret, session, iam_endpoint)
    name = f"pool {pool.name} munge key"
    if not secret:
        return [check]
    if token is None:
        return [check, Check(name, "skip", f"{secret} not read: could not act as {account}")]
    endpoint = (node.secretmanager_endpoint or SECRET_MANAGER).rstrip("/")
    return [check, _read_secret(name, endpoint, secret, account, token)]


def _impersonate(
    pool: str,
    account: str,
    project: str,
    secret: str,
    session: Callable[[], Any],
    iam_endpoint: str,
) -> tuple[str | None, Check]:
    from google.auth.exceptions import GoogleAuthError

    name = f"pool {pool} service account"
    url = f"{iam_endpoint.rstrip('/')}/v1/projects/-/serviceAccounts/{account}:generateAccessToken"
    fix = f"grant the controller roles/iam.serviceAccountTokenCreator on {account}"
    if secret:
        fix += f", or check by hand that it holds roles/secretmanager.secretAccessor on {secret}"
    try:
        resp = session().post(
            url, json={"scope": [CLOUD_PLATFORM], "lifetime": "300s"}, timeout=TIMEOUT_S
        )
    except (requests.RequestException, GoogleAuthError) as exc:
        why = f"{type(exc).__name__}: {exc}"[:200]
        return None, Check(name, "warn", f"could not impersonate {account}: {why}", fix)
    if resp.status_code == 200:
        ok = Check(name, "ok", f"{account} exists and the controller may act as it")
        return str(resp.json()["accessToken"]), ok
    why = f"HTTP {resp.status_code}: {_message(resp)}"
    if resp.status_code == 404:
        m = re.fullmatch(r"[^@]+@([^.]+)\.iam\.gserviceaccount\.com", account)
        where = m[1] if m else project  # else a Google-managed account (the default one)
        return None, Check(
            name,
            "fail",
            f"service account {account} does not exist in project {where} ({why})",
            f"create it (gcloud iam service-accounts create), or set "
            f"pools[{pool}].service_account to an existing one",
        )
    return None, Check(name, "warn", f"could not impersonate {account} to test it ({why})", fix)


def _read_secret(name: str, endpoint: str, secret: str, account: str, token: str) -> Check:
    """Read the secret's latest version as `account`; only its length is ever reported."""
    try:
        resp = requests.get(
            f"{endpoint}/v1/{secret}/versions/latest:access",
            headers={"Authorization": f"Bearer {token}"},
            timeout=TIMEOUT_S,
        )
    except requests.RequestException as exc:
        return Check(
            name,
            "warn",
            f"could not reach {endpoint} from here to read {secret}: {type(exc).__name__}",
            "check node.secretmanager_endpoint (the VMs must reach it too)",
        )
    why = f"HTTP {resp.status_code}: {_message(resp)}"
    if resp.status_code == 403:
        return Check(
            name,
            "fail",
            f"{account} may not read secret {secret} ({why})",
            f"grant roles/secretmanager.secretAccessor on the secret to {account} "
            "(gcloud secrets add-iam-policy-binding)",
        )
    if resp.status_code == 404:
        return Check(
            name,
            "fail",
            f"secret {secret} has no version ({why})",
            f"create it and add the munge key as a version (gcloud secrets versions add "
            f"{secret.rsplit('/', 1)[-1]} --data-file=/etc/munge/munge.key)",
        )
    if resp.status_code != 200:
        return Check(
            name, "fail", f"reading {secret} as {account}: {why}", "see the answer's message"
        )
    try:
        size = len(base64.b64decode(resp.json()["payload"]["data"]))
    except (KeyError, TypeError, ValueError, binascii.Error):
        size = 0
    if not size:
        return Check(
            name, "fail", f"secret {secret}'s latest version is empty", "add the munge key"
        )
    return Check(name, "ok", f"{account} read {secret} (latest version, {size} bytes)")


def _message(resp: Any) -> str:
    """The error's message (never the body of a successful answer, which holds the secret)."""
    try:
        return str(resp.json()["error"]["message"])[:200]
    except (KeyError, TypeError, ValueError):
        return str(resp.reason)
