"""A GCE metadata server stand-in for one test host, answering from the GCE fake.

Run inside the host's own network namespace, bound to 169.254.169.254:80 there
(`provisioner.testing.hosts`), the address a GCE VM also reaches its metadata server at. Each
answer is read from the GCE fake's record of this one instance (instances.get over HTTP on the
tests' /24), so what the VM learns is what the cloud holds: its numeric id, its primary
address, and its metadata items (the controller's `slurm-node` among them).

As GCE documents it (https://cloud.google.com/compute/docs/metadata/querying-metadata):
- every request carries `Metadata-Flavor: Google`, else 403;
- `/computeMetadata/v1/instance/id`, `.../name`, `.../network-interfaces/0/ip`,
  `.../instance/attributes/<key>` (404 until the item exists).
- `/computeMetadata/v1/instance/preempted` is `FALSE`, or `TRUE` once GCE preempts the VM
  (https://cloud.google.com/compute/docs/instances/create-use-preemptible#detecting), read
  from the fake's `GET /_fake/preempted/<zone>/<name>`.
- `/computeMetadata/v1/instance/service-accounts/default/token`: an OAuth access token for the
  service account the VM runs as (`{"access_token", "expires_in", "token_type"}`), minted by the
  fake (`GET /_fake/token/<zone>/<name>`); 404 for a VM that runs as none
  (https://cloud.google.com/compute/docs/access/authenticate-workloads#applications).
Simplified: only the paths the node bootstrap reads; no wait-for-change, no recursive reads.
"""

from __future__ import annotations

import argparse
import http.server
import json
import urllib.error
import urllib.request
from typing import Any

from provisioner.testing.metadata_server import METADATA_ADDRESS, TextHandler, serve

PREFIX = "/computeMetadata/v1/instance/"


class GceMetadata:
    def __init__(self, endpoint: str, project: str, zone: str, name: str) -> None:
        self.url = f"{endpoint}/compute/v1/projects/{project}/zones/{zone}/instances/{name}"
        self.preempted_url = f"{endpoint}/_fake/preempted/{zone}/{name}"
        self.token_url = f"{endpoint}/_fake/token/{zone}/{name}"

    def _instance(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url, timeout=5) as resp:
            inst: dict[str, Any] = json.loads(resp.read())
        return inst

    def answer(self, path: str) -> str | None:
        if not path.startswith(PREFIX):
            return None
        rest = path[len(PREFIX) :]
        if rest == "preempted":
            with urllib.request.urlopen(self.preempted_url, timeout=5) as resp:
                return "TRUE" if json.loads(resp.read())["preempted"] else "FALSE"
        if rest == "service-accounts/default/token":
            try:
                with urllib.request.urlopen(self.token_url, timeout=5) as resp:
                    return str(resp.read().decode())
            except urllib.error.HTTPError:
                return None
        try:
            inst = self._instance()
        except urllib.error.HTTPError:
            return None
        if rest == "id":
            return str(inst["id"])
        if rest == "name":
            return str(inst["name"])
        if rest == "network-interfaces/0/ip":
            nics = inst.get("networkInterfaces") or [{}]
            return str(nics[0].get("networkIP", "")) or None
        if rest.startswith("attributes/"):
            key = rest.split("/", 1)[1]
            items = {i["key"]: i["value"] for i in inst.get("metadata", {}).get("items", [])}
            value = items.get(key)
            return str(value) if value is not None else None
        return None


def handler_for(meta: GceMetadata) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(TextHandler):
        content_type = "application/text"  # as GCE's metadata server answers
        extra_headers = {"Metadata-Flavor": "Google"}  # noqa: RUF012 (a constant)

        def do_GET(self) -> None:
            if self.headers.get("Metadata-Flavor") != "Google":
                self.send_text(403, "Missing Metadata-Flavor:Google header.")
                return
            self.send_value(meta.answer(self.path))

    return Handler


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--endpoint", required=True, help="the GCE fake's URL on the tests' /24")
    ap.add_argument("--project", required=True)
    ap.add_argument("--zone", required=True)
    ap.add_argument("--instance", required=True, help="the instance's name")
    ap.add_argument("--bind", default=METADATA_ADDRESS)
    ap.add_argument("--port", type=int, default=80)
    args = ap.parse_args(argv)
    meta = GceMetadata(args.endpoint, args.project, args.zone, args.instance)
    serve(handler_for(meta), args.bind, args.port)


if __name__ == "__main__":
    main()
