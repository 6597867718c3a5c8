"""A small, stateful fake of the Compute Engine REST API (stdlib `http.server`, 127.0.0.1 only).

Google publishes no Compute Engine emulator, and the community candidates either lack instance
templates and managed instance groups or break the official client (see docs/clouds.md), so the
tests drive the real `google-cloud-compute` REST clients against this fake. It implements only what
the provisioner touches, in the real wire format (camelCase JSON, numeric string ids, Operations
that go RUNNING -> DONE):

* global instance templates: insert, get, list, delete
* regional managed instance groups: insert, get, list, delete, resize, listManagedInstances,
  deleteInstances (decrements the target size), setInstanceTemplate
* zonal instances: insert, get, list (with a `labels.KEY = "VALUE"` filter), delete, and the
  aggregated list across zones; getSerialPortOutput (port 1) from `consoles`, which the test
  hosts' hypervisor sets to what each VM wrote to its console
* operations: get and wait, for global, regional and zonal scopes
* `requestId`: a repeated request returns the first operation and changes nothing again
* images (get, getFromFamily), networks and subnetworks (get), firewall rules (get, list,
  insert): provisioner/testing/fake_gce_network.py, through `add_image`, `add_network`,
  `add_subnetwork`, `add_firewall` and `add_default_network` (nothing exists until added)

Times (`creationTimestamp`, `lastStartTimestamp`, the `Date` header of every answer, and the
`VmRecord` a bill is computed from) are on the fake's `clock`: the cloud's own clock, which a
test may skew from the controller's.

Faults: `add_fault(...)` answers a matching request with an HTTP error (e.g. 403 quotaExceeded,
429) or with an Operation that finishes with an error (e.g. ZONE_RESOURCE_POOL_EXHAUSTED, carrying
`httpErrorStatusCode` as GCE does). `set_capacity(location, machine_type, n)` limits how many more
instances of a machine type a zone or region can create: a managed group then stays below its
target size and reports the stockout in each missing instance's `lastAttempt.errors`, as GCE does.
Every request is recorded in `requests` (method, path, query, JSON body) for assertions.

Launch errors (`launch_errors[machine_type] = kind`): every member of that type fails with the
code and message of `LAUNCH_ERRORS` (stockout, quota, a missing image, an invalid field) in its
`lastAttempt.errors`, as `listManagedInstances` reports them.

Zones that do not answer (`unreachable_zones`): the aggregated instance list then reports each
such zone as a scope with an `UNREACHABLE` warning and lists it in `unreachables`, and only
with `returnPartialSuccess=true`; without it the whole call fails (503), as the API reference
of `instances.aggregatedList` describes. Its VMs are still there, just not listed.

Preemption (`preempt(zone, name)`): the VM's `instance/preempted` metadata value is TRUE from
then (served to the metadata stand-in at `GET /_fake/preempted/<zone>/<name>`), and 30 s
later (GCE: "about 30 seconds") the VM stops. A managed group's member is then recreated under
the same name, with a new id and creation time, as GCE documents for preempted VMs in a MIG
(https://cloud.google.com/compute/docs/instances/spot#preemption-process, "Managed instance
groups recreate ... when resources are available"); a VM of no group is left TERMINATED.
Every VM ever created stays in `vms` (a recreated name's earlier VMs in `retired`).

Secret Manager (`secret_manager`, provisioner/testing/fake_secret_manager.py): `versions.access`
on this same endpoint, for the service account whose token the caller presents. A VM's metadata
stand-in gets that token at `GET /_fake/token/<zone>/<name>`, minted for the first service
account in the VM's `serviceAccounts` (from its instance template), as the metadata server's
`service-accounts/default/token` gives it.

IAM Credentials (`iam`, provisioner/testing/fake_iam_credentials.py): `generateAccessToken` on
this same endpoint, for the service accounts a test adds (`add_service_account`), minting
tokens the fake Secret Manager takes: the controller impersonating a VM's account.
Simplified: recreation is immediate (resources are always there again), and the recreated VM
runs at once.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from provisioner.testing import fake_iam_credentials as iam_credentials
from provisioner.testing import fake_secret_manager as secret_manager
from provisioner.testing.fake_gce_network import FakeGceNetwork

_P = r"/compute/v1/projects/(?P<project>[^/]+)"
PREEMPTION_NOTICE_S = 30.0
SERIAL_BYTES = 1024 * 1024  # GCE keeps the newest 1 MB of a serial port
_STOCKOUT_MSG = "The zone '{zone}' does not have enough resources available to fulfill the request."

Json = dict[str, Any]


@dataclass
class GceFault:
    method: str = ""  # "" matches any method
    path_contains: str = ""
    http_status: int = 0  # an HTTP error answer ...
    reason: str = ""  # ... with this errors[].reason
    op_error: str = ""  # or: an Operation that finishes with this error code
    op_http_status: int = 503
    message: str = ""
    times: int = 1
    # with `http_status`: carry the request out first, then answer the error (the change is
    # made, the answer is lost on the way back)
    apply: bool = False


@dataclass
class _Member:
    name: str
    zone: str
    created: bool
    error: str = ""
    message: str = ""


# kind -> the code and message GCE puts in a managed instance's lastAttempt.errors when it
# cannot create it ({zone}, {region}, {image} filled in)
LAUNCH_ERRORS = {
    "capacity": ("ZONE_RESOURCE_POOL_EXHAUSTED", _STOCKOUT_MSG),
    "quota": (
        "QUOTA_EXCEEDED",
        "Quota 'NVIDIA_A100_GPUS' exceeded.  Limit: 0.0 in region {region}.",
    ),
    "image": ("RESOURCE_NOT_FOUND", "The resource '{image}' was not found"),
    "parameter": (
        "INVALID_FIELD_VALUE",
        "Invalid value for field 'resource.machineType': the machine type is not available in "
        "zone {zone}.",
    ),
}


@dataclass
class _Result:
    status: int
    body: Json = field(default_factory=dict)


def _wall() -> datetime:
    return datetime.now(UTC)


@dataclass
class VmRecord:
    """One VM the fake ever created, in the clock's time: what a bill is computed from."""

    name: str
    zone: str
    machine_type: str
    labels: dict[str, str]
    created_ts: float
    deleted_ts: float | None = None


def _last(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


class FakeGCE:
    def __init__(
        self,
        op_polls_until_done: int = 1,
        zones_per_region: int = 3,
        *,
        clock: Callable[[], datetime] = _wall,
        host: str = "127.0.0.1",
        subnet: str = "",
    ) -> None:
        self.clock = clock  # creation and deletion times (a soak points it at its world)
        # VMs' primary addresses: SUBNET.4 and up in this /24 prefix ("10.77.0") when set,
        # else 10.128.x.y from the VM's id.
        self.subnet = subnet
        self._addresses = itertools.count(4)
        self.vms: dict[str, VmRecord] = {}  # every VM ever created, deleted ones included
        self.requests: list[Json] = []
        self.instances: dict[tuple[str, str], Json] = {}  # (zone, name)
        self.templates: dict[str, Json] = {}  # name
        self.migs: dict[tuple[str, str], Json] = {}  # (region, name)
        self.members: dict[tuple[str, str], list[_Member]] = {}
        self.ops: dict[str, Json] = {}
        self.faults: list[GceFault] = []
        self.capacity: dict[tuple[str, str], int] = {}  # (zone or region, machine type)
        self.unreachable_zones: set[str] = set()  # zones an aggregated list cannot reach
        self.launch_errors: dict[str, str] = {}  # machine type -> a kind of LAUNCH_ERRORS
        self.preempting: dict[tuple[str, str], datetime] = {}  # (zone, name) -> when it stops
        self.retired: list[VmRecord] = []  # VMs whose name a recreated VM took
        # Secret Manager, with the tokens the metadata stand-in mints for a VM's account
        self.secret_manager = secret_manager.FakeSecretManager()
        # (zone, name) -> what the VM wrote to its serial console (None: every console empty)
        self.consoles: Callable[[str, str], str] | None = None
        self.iam = iam_credentials.FakeIamCredentials(self.secret_manager.mint_token, clock)
        # images, networks, subnetworks, firewall rules
        self.network = FakeGceNetwork(self._base, self._now)
        self.op_polls_until_done = op_polls_until_done
        self.zones_per_region = zones_per_region
        self._request_ids: dict[str, Json] = {}
        self._ids = itertools.count(1001)
        self.lock = threading.RLock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def date_time_string(self, timestamp: float | None = None) -> str:
                # the `Date` header on the cloud's clock, as a real server stamps it on its own
                stamp = fake.clock().timestamp() if timestamp is None else timestamp
                return str(super().date_time_string(stamp))

            def _do(self) -> None:
                url = urlparse(self.path)
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                body = json.loads(raw) if raw else None
                if secret_manager.handles(url.path):
                    auth = self.headers.get("Authorization") or ""
                    with fake.lock:
                        res = _Result(*fake.secret_manager.access(url.path, auth))
                elif iam_credentials.handles(url.path):
                    with fake.lock:
                        res = _Result(*fake.iam.generate_access_token(url.path, body))
                else:
                    res = fake.handle(self.command, url.path, parse_qs(url.query), body)
                data = json.dumps(res.body).encode()
                self.send_response(res.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _do

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.endpoint = f"http://{host}:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # ------------------------------------------------------------------ control
    def start(self) -> FakeGCE:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def add_fault(self, **kw: Any) -> GceFault:
        fault = GceFault(**kw)
        with self.lock:
            self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        """Forget every fault, capacity limit, launch error and unreachable zone (the VMs and
        groups stay)."""
        with self.lock:
            self.faults.clear()
            self.capacity.clear()
            self.launch_errors.clear()
            self.unreachable_zones.clear()

    def set_capacity(self, location: str, machine_type: str, count: int) -> None:
        """`location` (a zone or a region) can create only `count` more `machine_type` VMs."""
        with self.lock:
            self.capacity[(location, machine_type)] = count

    def preempt(self, zone: str, name: str, notice_s: float = PREEMPTION_NOTICE_S) -> None:
        """GCE preempts a spot VM: `instance/preempted` is TRUE from now, the VM stops
        `notice_s` later (and its group, if any, recreates it under the same name)."""
        with self.lock:
            self.preempting[(zone, name)] = self.clock() + timedelta(seconds=notice_s)

    def take_due_preemptions(self) -> list[str]:
        """Stop the preempted VMs whose time has come (done on every request too); the names."""
        with self.lock:
            return self._carry_out_preemptions()

    def _carry_out_preemptions(self) -> list[str]:
        now = self.clock()
        due = [key for key, at in self.preempting.items() if at <= now]
        for zone, name in due:
            del self.preempting[(zone, name)]
            inst = self.instances.get((zone, name))
            if inst is None:
                continue
            group = next(
                (key for key, ms in self.members.items() if any(m.name == name for m in ms)),
                None,
            )
            if group is None:
                inst["status"] = "TERMINATED"  # stopped, kept: a VM of no group
                self.vms[name].deleted_ts = now.timestamp()
                continue
            project = str(inst["selfLink"]).split("/projects/", 1)[1].split("/", 1)[0]
            mig = self.migs[group]
            props = self.templates[_last(str(mig["instanceTemplate"]))].get("properties", {})
            self._drop(zone, name)
            self.retired.append(self.vms[name])
            self._new_instance(project, zone, name, props, created_by=str(mig["selfLink"]))
        return [name for _, name in due]

    def add_image(self, project: str, name: str, family: str = "") -> Json:
        with self.lock:
            return self.network.add_image(project, name, family)

    def add_network(self, project: str, name: str, *, auto: bool = False) -> Json:
        with self.lock:
            return self.network.add_network(project, name, auto=auto)

    def add_subnetwork(
        self, project: str, region: str, name: str, network: str, ip_cidr_range: str
    ) -> Json:
        with self.lock:
            return self.network.add_subnetwork(project, region, name, network, ip_cidr_range)

    def add_firewall(self, project: str, body: Json) -> Json:
        with self.lock:
            return self.network.add_firewall(project, body)

    def add_default_network(
        self, project: str, regions: tuple[str, ...] = ("us-central1",)
    ) -> None:
        with self.lock:
            self.network.add_default_network(project, regions)

    def add_service_account(self, email: str, *, impersonable: bool = True) -> None:
        """A service account, which the controller may impersonate unless `impersonable` is
        false (it holds no roles/iam.serviceAccountTokenCreator on it)."""
        with self.lock:
            self.iam.add_service_account(email, impersonable=impersonable)

    def sent(self, method: str, path_suffix: str) -> list[Json]:
        """Recorded requests whose path ends with `path_suffix` (for assertions)."""
        return [
            r for r in self.requests if r["method"] == method and r["path"].endswith(path_suffix)
        ]

    # ------------------------------------------------------------------ helpers
    def _base(self, project: str) -> str:
        return f"{self.endpoint}/compute/v1/projects/{project}"

    def _op(
        self, project: str, scope: str, target: str, op_type: str, error: GceFault | None
    ) -> Json:
        name = f"operation-{next(self._ids)}"
        base = self._base(project)
        op: Json = {
            "kind": "compute#operation",
            "id": str(next(self._ids)),
            "name": name,
            "operationType": op_type,
            "targetLink": target,
            "status": "RUNNING",
            "progress": 0,
            "insertTime": self._now(),
            "selfLink": f"{base}/{scope}/operations/{name}",
            "_polls": 0,
            "_error": error,
        }
        if scope.startswith("zones/"):
            op["zone"] = f"{base}/{scope}"
        elif scope.startswith("regions/"):
            op["region"] = f"{base}/{scope}"
        self.ops[name] = op
        if self.op_polls_until_done <= 0:
            self._finish(op)
        return self._public(op)

    def _now(self) -> str:
        return self.clock().isoformat(timespec="milliseconds")

    def _finish(self, op: Json) -> None:
        op["status"], op["progress"], op["endTime"] = "DONE", 100, self._now()
        fault: GceFault | None = op["_error"]
        if fault is not None:
            msg = fault.message or f"Injected {fault.op_error}"
            op["error"] = {"errors": [{"code": fault.op_error, "message": msg}]}
            # GCE sets both; google-api-core raises only when httpErrorStatusCode is present.
            op["httpErrorStatusCode"] = fault.op_http_status
            op["httpErrorMessage"] = "SERVICE UNAVAILABLE"

    @staticmethod
    def _public(op: Json) -> Json:
        return {k: v for k, v in op.items() if not k.startswith("_")}

    @staticmethod
    def _err(code: int, message: str, reason: str, status: str = "") -> _Result:
        return _Result(
            code,
            {
                "error": {
                    "code": code,
                    "message": message,
                    "status": status,
                    "errors": [{"message": message, "domain": "global", "reason": reason}],
                }
            },
        )

    def _not_found(self, what: str) -> _Result:
        return self._err(404, f"The resource '{what}' was not found", "notFound", "NOT_FOUND")

    def _zones(self, region: str, mig: Json) -> list[str]:
        zones = [_last(z["zone"]) for z in mig.get("distributionPolicy", {}).get("zones", [])]
        return zones or [f"{region}-{c}" for c in "abcdefg"[: self.zones_per_region]]

    def _take_capacity(self, zone: str, machine_type: str) -> bool:
        region = zone.rsplit("-", 1)[0]
        for key in ((zone, machine_type), (region, machine_type)):
            if key in self.capacity:
                if self.capacity[key] <= 0:
                    return False
                self.capacity[key] -= 1
                return True
        return True

    # ------------------------------------------------------------------ router
    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> _Result:
        q = {k: v[0] for k, v in query.items()}
        with self.lock:
            self._carry_out_preemptions()
            if path.startswith("/_fake/preempted/"):
                zone, _, name = path[len("/_fake/preempted/") :].partition("/")
                return _Result(200, {"preempted": (zone, name) in self.preempting})
            if path.startswith("/_fake/token/"):
                zone, _, name = path[len("/_fake/token/") :].partition("/")
                return self._token(zone, name)
            self.requests.append({"method": method, "path": path, "query": q, "body": body})
            op_fault: GceFault | None = None
            for f in self.faults:
                if f.times <= 0 or (f.method and f.method != method):
                    continue
                if f.path_contains not in path:
                    continue
                f.times -= 1
                if f.http_status:
                    msg = f.message or f"Injected {f.reason or f.http_status}"
                    if f.apply:
                        self._route(method, path, q, body, None)
                    return self._err(f.http_status, msg, f.reason or "injected")
                op_fault = f
                break
            rid = q.get("requestId")
            if rid and rid in self._request_ids:
                return _Result(200, self._request_ids[rid])
            res = self._route(method, path, q, body, op_fault)
            if rid and res.status == 200 and res.body.get("kind") == "compute#operation":
                self._request_ids[rid] = res.body
            return res

    def _route(self, method: str, path: str, q: dict[str, str], body: Any, fault: Any) -> _Result:
        m = re.fullmatch(
            _P + r"/(?P<scope>global|regions/[^/]+|zones/[^/]+)/operations/(?P<op>[^/]+)"
            r"(?P<wait>/wait)?",
            path,
        )
        if m:
            return self._operation(m["op"], bool(m["wait"]))
        m = re.fullmatch(_P + r"/aggregated/instances", path)
        if m and method == "GET":
            return self._aggregated(q)
        m = re.fullmatch(_P + r"/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)/serialPort", path)
        if m and method == "GET":
            return self._serial_port(m["zone"], m["name"])
        m = re.fullmatch(_P + r"/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)/setMetadata", path)
        if m and method == "POST":
            return self._set_metadata(m["project"], m["zone"], m["name"], body, fault)
        m = re.fullmatch(_P + r"/zones/(?P<zone>[^/]+)/instances(?:/(?P<name>[^/]+))?", path)
        if m:
            return self._instances(method, m["project"], m["zone"], m["name"], q, body, fault)
        m = re.fullmatch(_P + r"/global/instanceTemplates(?:/(?P<name>[^/]+))?", path)
        if m:
            return self._templates(method, m["project"], m["name"], body, fault)
        m = re.fullmatch(
            _P + r"/regions/(?P<region>[^/]+)/instanceGroupManagers(?:/(?P<name>[^/]+))?"
            r"(?:/(?P<verb>[A-Za-z]+))?",
            path,
        )
        if m:
            return self._migs(
                method, m["project"], m["region"], m["name"], m["verb"], q, body, fault
            )
        answer = self.network.route(
            method,
            path,
            body,
            lambda p, link, kind: self._op(p, "global", link, kind, fault),
            fault is None,
        )
        if answer is not None:
            return _Result(*answer)
        return self._err(404, f"fake_gce: no route for {method} {path}", "notFound")

    def _serial_port(self, zone: str, name: str) -> _Result:
        """`instances.getSerialPortOutput` (port 1, the console): what the VM wrote there, from
        `consoles` (the test hosts' hypervisor supplies it), its newest 1 MB as GCE keeps it."""
        if (zone, name) not in self.instances:
            return self._not_found(f"projects/-/zones/{zone}/instances/{name}")
        text = self.consoles(zone, name) if self.consoles else ""
        data = text.encode("utf-8", "replace")
        kept = data[-SERIAL_BYTES:].decode("utf-8", "replace")
        return _Result(
            200,
            {
                "kind": "compute#serialPortOutput",
                "contents": kept,
                "start": str(max(0, len(data) - SERIAL_BYTES)),
                "next": str(len(data)),
            },
        )

    def _token(self, zone: str, name: str) -> _Result:
        """An access token for the service account the VM runs as (its metadata server's
        `service-accounts/default/token`); 404 for a VM that runs as none, as GCE answers."""
        inst = self.instances.get((zone, name))
        accounts = (inst or {}).get("serviceAccounts") or []
        if not accounts:
            return self._not_found(f"service account of {zone}/{name}")
        return _Result(200, self.secret_manager.mint_token(str(accounts[0]["email"])))

    def _operation(self, name: str, wait: bool) -> _Result:
        op = self.ops.get(name)
        if op is None:
            return self._not_found(f"operations/{name}")
        op["_polls"] += 1
        if op["status"] != "DONE" and (wait or op["_polls"] >= self.op_polls_until_done):
            self._finish(op)
        return _Result(200, self._public(op))

    # ---- instances
    def _label_filter(self, items: list[Json], flt: str) -> list[Json]:
        fm = re.fullmatch(r'\s*labels\.(\S+)\s*=\s*"?([^"]*)"?\s*', flt)
        if fm:
            return [i for i in items if i.get("labels", {}).get(fm[1]) == fm[2]]
        nm = re.fullmatch(r'\s*name\s*=\s*"?([^"]*)"?\s*', flt)
        if nm:
            return [i for i in items if i.get("name") == nm[1]]
        return items

    def _aggregated(self, q: dict[str, str]) -> _Result:
        partial = q.get("returnPartialSuccess", "").lower() == "true"
        if self.unreachable_zones and not partial:
            return self._err(503, "The service is currently unavailable.", "backendError")
        by_zone: dict[str, list[Json]] = {}
        for (zone, _), inst in self.instances.items():
            by_zone.setdefault(zone, []).append(inst)
        items: Json = {}
        for zone, insts in sorted(by_zone.items()):
            if zone in self.unreachable_zones:
                continue
            if "filter" in q:
                insts = self._label_filter(insts, q["filter"])
            if insts:
                items[f"zones/{zone}"] = {"instances": insts}
        out: Json = {"kind": "compute#instanceAggregatedList", "items": items}
        for zone in sorted(self.unreachable_zones):
            items[f"zones/{zone}"] = {
                "warning": {
                    "code": "UNREACHABLE",
                    "message": f"Scope 'zones/{zone}' is unreachable.",
                    "data": [{"key": "scope", "value": f"zones/{zone}"}],
                }
            }
        if self.unreachable_zones:
            out["unreachables"] = [f"zones/{z}" for z in sorted(self.unreachable_zones)]
        return _Result(200, out)

    def _new_instance(
        self, project: str, zone: str, name: str, props: Json, created_by: str = ""
    ) -> Json:
        base = self._base(project)
        inst: Json = dict(props)
        mt = str(inst.get("machineType", ""))
        inst.update(
            {
                "kind": "compute#instance",
                "id": str(next(self._ids)),
                "name": name,
                "status": "RUNNING",
                "zone": f"{base}/zones/{zone}",
                "machineType": f"{base}/zones/{zone}/machineTypes/{_last(mt)}",
                "selfLink": f"{base}/zones/{zone}/instances/{name}",
                "creationTimestamp": self._now(),
                # the fake's VMs run at once: billed from here (GCE: RUNNING since)
                "lastStartTimestamp": self._now(),
            }
        )
        if created_by:
            items = [
                i for i in inst.get("metadata", {}).get("items", []) if i["key"] != "created-by"
            ]
            items.append({"key": "created-by", "value": created_by})
            inst["metadata"] = {"items": items}
        inst.setdefault("metadata", {})["fingerprint"] = f"fp{inst['id']}"
        # The primary address GCE gives on the subnet (simplified: the next of a counter).
        nics = [dict(n) for n in inst.get("networkInterfaces") or [{"network": "default"}]]
        n = int(inst["id"])
        if self.subnet:
            nics[0]["networkIP"] = f"{self.subnet}.{next(self._addresses)}"
        else:
            nics[0]["networkIP"] = f"10.128.{n // 250 % 250}.{n % 250 + 2}"
        inst["networkInterfaces"] = nics
        self.instances[(zone, name)] = inst
        self.vms[name] = VmRecord(
            name, zone, _last(mt), dict(inst.get("labels", {})), self.clock().timestamp()
        )
        return inst

    def _set_metadata(
        self, project: str, zone: str, name: str, body: Any, fault: GceFault | None
    ) -> _Result:
        """instances.setMetadata: the whole metadata replaced, refused (412 conditionNotMet)
        unless the fingerprint sent is the current one, as GCE documents
        (https://cloud.google.com/compute/docs/reference/rest/v1/instances/setMetadata)."""
        inst = self.instances.get((zone, name))
        if inst is None:
            return self._not_found(f"zones/{zone}/instances/{name}")
        meta = inst.setdefault("metadata", {})
        current = str(meta.get("fingerprint", ""))
        if str(body.get("fingerprint", "")) != current:
            return self._err(412, "Supplied fingerprint does not match current", "conditionNotMet")
        if fault is None:
            meta["items"] = list(body.get("items", []))
            meta["fingerprint"] = f"fp{next(self._ids)}"
        link = f"{self._base(project)}/zones/{zone}/instances/{name}"
        return _Result(200, self._op(project, f"zones/{zone}", link, "setMetadata", fault))

    def _drop(self, zone: str, name: str) -> None:
        """The VM is gone (deleted, or shrunk out of its group)."""
        if self.instances.pop((zone, name), None) is not None:
            self.vms[name].deleted_ts = self.clock().timestamp()

    def delete_vm(self, zone: str, name: str) -> None:
        """The platform takes a VM away (a host error, a preemption): it is gone, and its
        group, if any, has one member fewer, as after a repair that found no capacity."""
        with self.lock:
            self._drop(zone, name)
            for key, members in self.members.items():
                kept = [m for m in members if m.name != name]
                if len(kept) != len(members):
                    self.members[key] = kept
                    self.migs[key]["targetSize"] -= 1

    def _instances(
        self,
        method: str,
        project: str,
        zone: str,
        name: str | None,
        q: dict[str, str],
        body: Any,
        fault: GceFault | None,
    ) -> _Result:
        link = f"{self._base(project)}/zones/{zone}/instances"
        if method == "POST" and name is None:
            name = str(body["name"])
            if (zone, name) in self.instances:
                return self._err(409, f"instance {name} already exists", "alreadyExists")
            if fault is None:
                self._new_instance(project, zone, name, body)
            return _Result(
                200, self._op(project, f"zones/{zone}", f"{link}/{name}", "insert", fault)
            )
        if method == "GET" and name is None:
            items = [v for (z, _), v in self.instances.items() if z == zone]
            if "filter" in q:
                items = self._label_filter(items, q["filter"])
            return _Result(200, {"kind": "compute#instanceList", "items": items})
        if name is None:
            return self._err(405, "method not allowed", "badRequest")
        if method == "GET":
            found = self.instances.get((zone, name))
            return (
                _Result(200, found) if found else self._not_found(f"zones/{zone}/instances/{name}")
            )
        if method == "DELETE":
            if (zone, name) not in self.instances:
                return self._not_found(f"zones/{zone}/instances/{name}")
            if fault is None:
                self._drop(zone, name)
            return _Result(
                200, self._op(project, f"zones/{zone}", f"{link}/{name}", "delete", fault)
            )
        return self._err(405, "method not allowed", "badRequest")

    # ---- instance templates
    def _templates(
        self, method: str, project: str, name: str | None, body: Any, fault: GceFault | None
    ) -> _Result:
        link = f"{self._base(project)}/global/instanceTemplates"
        if method == "POST" and name is None:
            tname = str(body["name"])
            if tname in self.templates:
                return self._err(409, f"template {tname} already exists", "alreadyExists")
            if fault is None:
                self.templates[tname] = dict(
                    body,
                    kind="compute#instanceTemplate",
                    id=str(next(self._ids)),
                    selfLink=f"{link}/{tname}",
                    creationTimestamp=self._now(),
                )
            return _Result(200, self._op(project, "global", f"{link}/{tname}", "insert", fault))
        if method == "GET" and name is None:
            return _Result(200, {"items": list(self.templates.values())})
        if name is None:
            return self._err(405, "method not allowed", "badRequest")
        if method == "GET":
            tpl = self.templates.get(name)
            return _Result(200, tpl) if tpl else self._not_found(f"instanceTemplates/{name}")
        if method == "DELETE":
            if name not in self.templates:
                return self._not_found(f"instanceTemplates/{name}")
            if fault is None:
                del self.templates[name]
            return _Result(200, self._op(project, "global", f"{link}/{name}", "delete", fault))
        return self._err(405, "method not allowed", "badRequest")

    # ---- regional managed instance groups
    def _migs(
        self,
        method: str,
        project: str,
        region: str,
        name: str | None,
        verb: str | None,
        q: dict[str, str],
        body: Any,
        fault: GceFault | None,
    ) -> _Result:
        base = f"{self._base(project)}/regions/{region}/instanceGroupManagers"
        scope = f"regions/{region}"
        if method == "POST" and name is None:
            gname = str(body["name"])
            if (region, gname) in self.migs:
                return self._err(409, f"group {gname} already exists", "alreadyExists")
            tpl = _last(str(body.get("instanceTemplate", "")))
            if tpl not in self.templates:
                return self._not_found(f"global/instanceTemplates/{tpl}")
            if fault is None:
                new = dict(
                    body,
                    kind="compute#instanceGroupManager",
                    id=str(next(self._ids)),
                    selfLink=f"{base}/{gname}",
                    region=f"{self._base(project)}/regions/{region}",
                    creationTimestamp=self._now(),
                )
                new["targetSize"] = 0
                self.migs[(region, gname)] = new
                self.members[(region, gname)] = []
                self._resize(project, region, new, int(body.get("targetSize", 0)))
            return _Result(200, self._op(project, scope, f"{base}/{gname}", "insert", fault))
        if method == "GET" and name is None:
            return _Result(200, {"items": [v for (r, _), v in self.migs.items() if r == region]})
        if name is None:
            return self._err(405, "method not allowed", "badRequest")
        mig = self.migs.get((region, name))
        if mig is None:
            return self._not_found(f"regions/{region}/instanceGroupManagers/{name}")
        target = f"{base}/{name}"
        if method == "GET" and verb is None:
            return _Result(200, self._mig_view(mig, region, name))
        if method == "DELETE" and verb is None:
            if fault is None:
                self._resize(project, region, mig, 0)
                del self.migs[(region, name)]
                del self.members[(region, name)]
            return _Result(200, self._op(project, scope, target, "delete", fault))
        if method == "POST" and verb == "resize":
            if fault is None:
                self._resize(project, region, mig, int(q["size"]))
            return _Result(200, self._op(project, scope, target, "resize", fault))
        if method == "POST" and verb == "listManagedInstances":
            return _Result(200, {"managedInstances": self._managed(project, region, name)})
        if method == "POST" and verb == "deleteInstances":
            if fault is None:
                # Each entry must name a member by its zone; GCE skips one that names no
                # member when skipInstancesOnValidationError is set, else refuses the call.
                urls = list((body or {}).get("instances", []))
                named = {
                    (m["zone"], m["name"])
                    for u in urls
                    if (m := re.search(r"zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)$", u))
                }
                members = {(mem.zone, mem.name) for mem in self.members[(region, name)]}
                if len(named & members) < len(urls) and not (body or {}).get(
                    "skipInstancesOnValidationError"
                ):
                    return self._err(400, f"Invalid instances: {urls}", "invalid")
                keep = []
                for mem in self.members[(region, name)]:
                    if (mem.zone, mem.name) in named:
                        self._drop(mem.zone, mem.name)
                        mig["targetSize"] -= 1
                    else:
                        keep.append(mem)
                self.members[(region, name)] = keep
            return _Result(200, self._op(project, scope, target, "deleteInstances", fault))
        if method == "POST" and verb == "setInstanceTemplate":
            if fault is None:
                mig["instanceTemplate"] = body["instanceTemplate"]
            return _Result(200, self._op(project, scope, target, "setInstanceTemplate", fault))
        return self._err(405, f"fake_gce: {method} {verb} not supported", "badRequest")

    def _mig_view(self, mig: Json, region: str, name: str) -> Json:
        members = self.members[(region, name)]
        creating = sum(1 for m in members if not m.created)
        view = dict(mig)
        view["currentActions"] = {
            "none": len(members) - creating,
            "creating": creating,
        }
        view["status"] = {"isStable": creating == 0}
        return view

    def _resize(self, project: str, region: str, mig: Json, size: int) -> None:
        name = str(mig["name"])
        members = self.members[(region, name)]
        zones = self._zones(region, mig)
        tpl = self.templates[_last(str(mig["instanceTemplate"]))]
        props: Json = tpl.get("properties", {})
        machine_type = str(props.get("machineType", ""))
        while len(members) < size:
            zone = zones[len(members) % len(zones)]
            iname = f"{mig.get('baseInstanceName', name)}-{next(self._ids):04x}"
            kind = self.launch_errors.get(_last(machine_type))
            if kind is None and not self._take_capacity(zone, machine_type):
                kind = "capacity"
            if kind is None:
                self._new_instance(project, zone, iname, props, created_by=str(mig["selfLink"]))
                members.append(_Member(iname, zone, True))
                continue
            code, text = LAUNCH_ERRORS[kind]
            image = str(
                (props.get("disks") or [{}])[0].get("initializeParams", {}).get("sourceImage", "")
            )
            msg = text.format(zone=zone, region=region, image=image)
            members.append(_Member(iname, zone, False, code, msg))
        while len(members) > size:  # instances never created go first, then the newest
            pending = [m for m in members if not m.created]
            victim = pending[-1] if pending else members[-1]
            members.remove(victim)
            self._drop(victim.zone, victim.name)
        mig["targetSize"] = size

    def _managed(self, project: str, region: str, name: str) -> list[Json]:
        out: list[Json] = []
        for m in self.members[(region, name)]:
            item: Json = {
                "instance": f"{self._base(project)}/zones/{m.zone}/instances/{m.name}",
                "currentAction": "NONE" if m.created else "CREATING",
            }
            inst = self.instances.get((m.zone, m.name))
            if inst is not None:
                item["id"] = inst["id"]
                item["instanceStatus"] = inst["status"]
            if m.error:
                item["lastAttempt"] = {
                    "errors": {"errors": [{"code": m.error, "message": m.message}]}
                }
            out.append(item)
        return out


def main() -> None:  # pragma: no cover - manual use
    fake = FakeGCE().start()
    print(f"fake Compute Engine API on {fake.endpoint}", flush=True)
    fake._thread.join()


if __name__ == "__main__":
    main()
