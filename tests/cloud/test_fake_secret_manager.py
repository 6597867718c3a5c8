"""The Secret Manager stand-in the GCE fake serves, over HTTP, as a burst VM reaches it: a token
from the VM's metadata stand-in (minted for the service account its instance runs as), then
`versions.access` with it. Expected answers are those GCP documents for `versions.access`."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from provisioner.testing.fake_gce import FakeGCE
from provisioner.testing.gce_metadata import PREFIX, GceMetadata

pytestmark = pytest.mark.gcp

PROJECT = "lab"
ZONE = "us-central1-a"
READER = "burst-node@lab.iam.gserviceaccount.com"
KEY = bytes(range(256)) * 4  # a 1 KiB munge key, every byte value in it


@pytest.fixture
def fake() -> Iterator[FakeGCE]:
    f = FakeGCE(op_polls_until_done=0).start()
    try:
        yield f
    finally:
        f.stop()


def vm(fake: FakeGCE, name: str, account: str | None) -> GceMetadata:
    """A VM (as its instance template makes it) and its metadata stand-in."""
    body: dict[str, Any] = {"name": name, "machineType": f"zones/{ZONE}/machineTypes/a2"}
    if account:
        body["serviceAccounts"] = [{"email": account, "scopes": ["cloud-platform"]}]
    req = urllib.request.Request(
        f"{fake.endpoint}/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(req, timeout=5).close()
    return GceMetadata(fake.endpoint, PROJECT, ZONE, name)


def access(fake: FakeGCE, name: str, token: str | None) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(f"{fake.endpoint}/v1/{name}:access", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def token_of(meta: GceMetadata) -> str:
    doc = meta.answer(PREFIX + "service-accounts/default/token")
    assert doc is not None
    got = json.loads(doc)
    assert got["token_type"] == "Bearer" and got["expires_in"] > 0
    return str(got["access_token"])


def test_the_vms_own_account_reads_the_latest_version_and_no_other_account_can(
    fake: FakeGCE,
) -> None:
    sm = fake.secret_manager
    sm.add_version(PROJECT, "munge-key", b"old key")
    sm.add_version(PROJECT, "munge-key", KEY)
    sm.grant_access(PROJECT, "munge-key", READER)
    reader = token_of(vm(fake, "node-a", READER))
    status, body = access(fake, f"projects/{PROJECT}/secrets/munge-key/versions/latest", reader)
    assert status == 200 and base64.b64decode(body["payload"]["data"]) == KEY
    assert body["name"] == f"projects/{PROJECT}/secrets/munge-key/versions/2"
    status, body = access(fake, f"projects/{PROJECT}/secrets/munge-key/versions/1", reader)
    assert status == 200 and base64.b64decode(body["payload"]["data"]) == b"old key"

    other = token_of(vm(fake, "node-b", "other@lab.iam.gserviceaccount.com"))
    status, body = access(fake, f"projects/{PROJECT}/secrets/munge-key/versions/latest", other)
    assert status == 403 and body["error"]["status"] == "PERMISSION_DENIED"
    assert "secretmanager.versions.access" in body["error"]["message"]
    # a stranger is not told which secrets exist: the same 403 for one that does not
    status, body = access(fake, f"projects/{PROJECT}/secrets/nothing/versions/latest", other)
    assert status == 403 and body["error"]["status"] == "PERMISSION_DENIED"


def test_no_token_a_made_up_one_and_a_vm_with_no_account_get_nothing(fake: FakeGCE) -> None:
    sm = fake.secret_manager
    sm.add_version(PROJECT, "munge-key", KEY)
    sm.grant_access(PROJECT, "munge-key", READER)
    name = f"projects/{PROJECT}/secrets/munge-key/versions/latest"
    assert access(fake, name, None)[1]["error"]["status"] == "UNAUTHENTICATED"
    assert access(fake, name, "ya29.made-up")[0] == 401
    # GCE's metadata server has no token for a VM that runs as no service account
    assert vm(fake, "node-c", None).answer(PREFIX + "service-accounts/default/token") is None
    # a permitted reader asking for a version that does not exist: 404
    reader = token_of(vm(fake, "node-d", READER))
    status, body = access(fake, f"projects/{PROJECT}/secrets/munge-key/versions/7", reader)
    assert status == 404 and body["error"]["status"] == "NOT_FOUND"
