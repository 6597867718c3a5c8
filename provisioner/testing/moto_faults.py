"""moto's server with a fault-injecting layer, for tests and the local demo (loopback only).

moto 5 has no error-injection API for EC2 or Auto Scaling, so this module adds two:

* **HTTP faults** (a WSGI middleware in front of moto's own app): an error response (EC2 or awsquery
  XML, with the botocore error code), or a canned successful body, for a given `Action`, optionally
  only when a form parameter matches, a given number of times. With `apply`, moto carries the
  request out first and its answer is dropped (apply-then-drop: a response lost on the way back).
* **Capacity pools**: how many instances of a type a region can still launch. EC2's real semantics
  follow: `RunInstances` below `MinCount` fails with `InsufficientInstanceCapacity`; an auto scaling
  group launches what fits and stays below its desired size. This is done by wrapping moto's
  in-process EC2 backend while the server runs.
* **Launch errors** (`set_launch_error`): every launch of a type in a region fails with one of
  AWS's documented reasons (capacity, spot capacity, vCPU quota, a missing image, an invalid
  parameter, a denied permission or KMS key); see `asg_activities.LAUNCH_ERRORS`.
* **Scaling activities** (`asg_activities`): each launch of a group, successful or failed, is
  kept as an activity stamped on the stand-in's clock and answered newest first, as AWS keeps
  them (moto itself answers `DescribeScalingActivities` empty). `set_result_delay` makes every
  outcome arrive that many seconds late (`InProgress` until then), as a real group's does.
* **Consoles** (`serve_consoles`): GetConsoleOutput answers with what each VM wrote to its
  serial console (the test hosts' hypervisor supplies it), its newest 64 KB as EC2 keeps them;
  moto alone answers every instance with the same canned text.
* **Spot warnings** (`spot_notices`): the interruption notice and the rebalance recommendation
  EC2 puts in a spot instance's metadata (`warn_spot`, `recommend_rebalance`), served to the
  IMDS stand-in at `GET /_spot/<instance id>`; at the notice's time the instance is taken.
* **Groups that act on their own** (`asg_autonomy`, in-process only): AZRebalance,
  ReplaceUnhealthy and Capacity Rebalancing, which moto names but never runs
  (`UpdateAutoScalingGroup`'s `CapacityRebalance`, which moto ignores, is applied here), and
  `DeleteAutoScalingGroup`'s `ForceDelete`, which ends every member as AWS does (moto spares
  the members protected from scale-in).

Control it from Python (`add_fault`, `set_capacity`, `set_launch_error`, `set_result_delay`,
`reset`) or over HTTP: `POST /_faults` (a fault as JSON, or `{"capacity": {...}}`),
`DELETE /_faults`, `GET /_faults`; spot warnings at `POST /_spot` and `GET /_spot/<id>`.

**The cloud's own clock** (`use_clock`): a real cloud stamps launches, terminations and its
answers' `Date` header on its clock, not the caller's. moto stamps them on the wall clock; with a
clock set, EC2 instance times (`LaunchTime`, the time in `StateTransitionReason`) and every
answer's `Date` header follow it instead, so a demo or a test on an injected clock has a cloud
on that clock (or skewed from it by as much as the test wants). moto's EC2 time source is a
module attribute: one clock per process.

Run standalone: `python -m provisioner.testing.moto_faults --port 5000`.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from provisioner.domain.errors import InvalidArgument, InvalidState
from provisioner.testing import asg_autonomy
from provisioner.testing.asg_activities import LAUNCH_ERRORS, ActivityLog
from provisioner.testing.spot_notices import NOTICE_S, SpotNotices

_EC2_ERR = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
    "<Message>{msg}</Message></Error></Errors><RequestID>{rid}</RequestID></Response>"
)
_QUERY_ERR = (
    "<ErrorResponse><Error><Type>{type}</Type><Code>{code}</Code><Message>{msg}</Message>"
    "</Error><RequestId>{rid}</RequestId></ErrorResponse>"
)
# the error code EC2's RunInstances answers each launch-error kind with
_EC2_CODES = {
    "capacity": "InsufficientInstanceCapacity",
    "spot_capacity": "InsufficientInstanceCapacity",
    "vcpu_quota": "VcpuLimitExceeded",
    "image": "InvalidAMIID.NotFound",
    "parameter": "InvalidParameterValue",
    "permission": "UnauthorizedOperation",
}
ASG_NAME_TAG = "aws:autoscaling:groupName"
CloudClock = Callable[[], datetime]  # a cloud's own clock (aware UTC)


@dataclass
class Fault:
    action: str
    code: str = ""
    status: int = 400
    times: int = 1
    service: str = "ec2"  # ec2 answers in EC2 XML, anything else in awsquery XML
    match: str = ""  # "Param=Value" that must be in the request's form parameters
    body: str = ""  # a canned *successful* response body instead of an error
    message: str = ""
    hits: int = 0
    # apply-then-drop: moto carries the request out, then the caller gets the error instead of
    # moto's answer (a response lost on the way back: the change happened, the caller can't know)
    apply: bool = False
    # the answer is held this long before it is sent (outside the layer's lock): a request in
    # flight that a test can kill the caller during (with `apply`, after moto carried it out)
    hold_s: float = 0.0

    def matches(self, action: str, params: dict[str, str]) -> bool:
        if self.times <= 0 or self.action != action:
            return False
        if self.match:
            key, _, value = self.match.partition("=")
            return params.get(key) == value
        return True


@dataclass
class _State:
    faults: list[Fault] = field(default_factory=list)
    hits: dict[str, int] = field(default_factory=dict)
    capacity: dict[tuple[str, str], int] = field(default_factory=dict)
    # (region, instance type) -> the kind of launch error every launch of it meets
    launch_errors: dict[tuple[str, str], str] = field(default_factory=dict)
    activities: ActivityLog = field(default_factory=ActivityLog)
    notices: SpotNotices = field(default_factory=SpotNotices)
    lock: threading.RLock = field(default_factory=threading.RLock)
    # set while a `hold_s` answer is being held (a caller is mid cloud call)
    holding: threading.Event = field(default_factory=threading.Event)
    clock: Callable[[], datetime] | None = None  # the cloud's clock (None: the wall clock)
    # instance id -> its serial console as the VM wrote it (None: moto's own canned answer)
    consoles: Callable[[str], str] | None = None

    def now(self) -> datetime:
        return self.clock() if self.clock else datetime.now(UTC)


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
CONSOLE_BYTES = 64 * 1024  # EC2 keeps the newest 64 KB of a console


def _console_answer(instance_id: str, state: _State) -> str:
    """GetConsoleOutput as EC2 answers it: the console's newest 64 KB, base64, stamped now
    (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_GetConsoleOutput.html)."""
    text = state.consoles(instance_id) if state.consoles else ""
    data = text.encode("utf-8", "replace")[-CONSOLE_BYTES:]
    stamp = state.now().strftime("%Y-%m-%dT%H:%M:%S.000Z")
    return (
        '<GetConsoleOutputResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
        f"<requestId>{uuid.uuid4()}</requestId><instanceId>{escape(instance_id)}</instanceId>"
        f"<timestamp>{stamp}</timestamp><output>{base64.b64encode(data).decode()}</output>"
        "</GetConsoleOutputResponse>"
    )


class FaultMiddleware:
    def __init__(self, app: WsgiApp, state: _State) -> None:
        self.app = app
        self.state = state

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path = environ.get("PATH_INFO", "")
        if path == "/_faults":
            return self._control(environ, start_response)
        self.state.notices.carry_out(self.state.now())  # the warned instances whose time came
        if path.startswith("/_spot"):
            return self._spot(environ, path, start_response)
        n = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(n) if n else b""
        environ["wsgi.input"] = io.BytesIO(body)  # hand the body back to moto
        query = environ.get("QUERY_STRING", "")
        form = parse_qs(body.decode("utf-8", "replace")) | parse_qs(query)
        params = {k: v[0] for k, v in form.items()}
        action = params.get("Action") or environ.get("HTTP_X_AMZ_TARGET", ".").split(".")[-1]
        held: Fault | None = None
        with self.state.lock:
            self.state.hits[action] = self.state.hits.get(action, 0) + 1
            for f in self.state.faults:
                if f.matches(action, params):
                    f.times -= 1
                    f.hits += 1
                    if f.apply:
                        for _ in self.app(environ, lambda *a, **k: None):
                            pass  # moto applied it; its answer is dropped
                    if f.hold_s <= 0:
                        return self._respond(f, start_response)
                    held = f
                    break
            if held is None and action == "GetConsoleOutput" and self.state.consoles:
                iid = params.get("InstanceId", "")
                return _xml(start_response, 200, _console_answer(iid, self.state))
            if held is None and action == "DescribeScalingActivities":
                group = params.get("AutoScalingGroupName", "")
                if self.state.activities.of(group):
                    body = self.state.activities.answer(group, self.state.now)
                    return _xml(start_response, 200, body)
        if (
            held is None
            and action == "DeleteAutoScalingGroup"
            and params.get("ForceDelete") == "true"
        ):
            asg_autonomy.unprotect_for_force_delete(
                _region(environ), params["AutoScalingGroupName"]
            )
        if held is None and action == "UpdateAutoScalingGroup" and "CapacityRebalance" in params:
            answer = self.app(environ, start_response)  # moto applies the rest of the update
            asg_autonomy.set_capacity_rebalance(
                _region(environ),
                params["AutoScalingGroupName"],
                params["CapacityRebalance"] == "true",
            )
            return answer
        if held is not None:
            self.state.holding.set()
            try:
                time.sleep(held.hold_s)  # the caller waits on the wire, as on a slow network
            finally:
                self.state.holding.clear()
            if held.apply or held.code or held.body:
                return self._respond(held, start_response)
            # only a delay: moto answers as usual, late
        return self.app(environ, start_response)

    @staticmethod
    def _respond(f: Fault, start_response: Callable[..., Any]) -> list[bytes]:
        if f.body:
            return _xml(start_response, f.status if f.status < 300 else 200, f.body)
        tmpl = _EC2_ERR if f.service == "ec2" else _QUERY_ERR
        text = tmpl.format(
            code=f.code,
            msg=escape(f.message or f"Injected {f.code}"),
            rid=uuid.uuid4(),
            type="Server" if f.status >= 500 else "Sender",
        )
        return _xml(start_response, f.status, text)

    def _spot(self, environ: dict[str, Any], path: str, start_response: Callable[..., Any]) -> Any:
        """`GET /_spot/<id>`: the instance's notices (the IMDS stand-in reads them). `POST
        /_spot` `{"instance_id", "region", "kind": "interruption"|"rebalance", "lead_s"}`: EC2
        gives one now (a test on another process, or the demo)."""
        notices = self.state.notices
        if environ["REQUEST_METHOD"] == "POST":
            n = int(environ.get("CONTENT_LENGTH") or 0)
            data = json.loads(environ["wsgi.input"].read(n) or b"{}")
            iid, region = str(data["instance_id"]), str(data.get("region", "us-east-1"))
            if data.get("kind", "interruption") == "rebalance":
                notices.recommend_rebalance(iid, region, self.state.now())
            else:
                notices.warn(iid, region, self.state.now(), float(data.get("lead_s", NOTICE_S)))
            path = f"/_spot/{iid}"
        found = notices.metadata(path[len("/_spot/") :])
        return _xml(start_response, 200, json.dumps(found), "application/json")

    def _control(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        method = environ["REQUEST_METHOD"]
        if method == "POST":
            n = int(environ.get("CONTENT_LENGTH") or 0)
            data = json.loads(environ["wsgi.input"].read(n) or b"{}")
            with self.state.lock:
                if "capacity" in data:
                    c = data["capacity"]
                    self.state.capacity[(c["region"], c["instance_type"])] = int(c["count"])
                else:
                    self.state.faults.append(Fault(**data))
        elif method == "DELETE":
            _clear(self.state)
        with self.state.lock:
            out = {
                "faults": [vars(f) for f in self.state.faults],
                "hits": self.state.hits,
                "capacity": [
                    {"region": r, "instance_type": t, "count": c}
                    for (r, t), c in self.state.capacity.items()
                ],
            }
        return _xml(start_response, 200, json.dumps(out), "application/json")


def _region(environ: dict[str, Any]) -> str:
    """The region a SigV4-signed request names in its credential scope."""
    auth = str(environ.get("HTTP_AUTHORIZATION", ""))
    scope = auth.partition("Credential=")[2].split(",")[0].split("/")
    return scope[2] if len(scope) > 2 else "us-east-1"


def _xml(
    start_response: Callable[..., Any], status: int, text: str, ctype: str = "text/xml"
) -> list[bytes]:
    raw = text.encode()
    start_response(
        f"{status} {'OK' if status < 400 else 'ERR'}",
        [("Content-Type", ctype), ("Content-Length", str(len(raw)))],
    )
    return [raw]


def _clear(state: _State) -> None:
    with state.lock:
        state.faults.clear()
        state.hits.clear()
        state.capacity.clear()
        state.launch_errors.clear()
        state.activities.result_delay_s = 0.0  # the history stays: it is the cloud's record


class _CapacityPatch:
    """Wraps moto's EC2 `run_instances` to enforce the capacity pools (installed while running)."""

    def __init__(self, state: _State) -> None:
        self.state = state
        self._orig: Any = None

    def install(self) -> None:
        from moto.ec2.exceptions import EC2ClientError
        from moto.ec2.models.instances import InstanceBackend

        if self._orig is not None:
            return
        orig = InstanceBackend.run_instances
        state = self.state

        class LaunchRefused(EC2ClientError):
            def __init__(self, code: str, message: str) -> None:
                super().__init__(code, message)

        def run_instances(
            backend: Any,
            image_id: str,
            count: int,
            user_data: Any,
            security_group_names: list[str],
            **kwargs: Any,
        ) -> Any:
            itype = kwargs.get("instance_type") or ""
            if kwargs.get("launch_template") and kwargs.get("is_instance_type_default"):
                tmpl = backend._get_template_from_args(kwargs["launch_template"]).data
                itype = tmpl.get("InstanceType") or itype
            key = (backend.region_name, itype)
            group = (kwargs.get("tags") or {}).get("instance", {}).get(ASG_NAME_TAG)
            with state.lock:
                at = state.now()
                kind = state.launch_errors.get(key)
                if group is None and kind == "kms":
                    kind = None  # a group-launch switch (RunInstances answers it later, not here)
                left = state.capacity.get(key)
                if kind is None and left is not None and left < count:
                    kind = "capacity"
                launch = count if kind is None else min(count, left or 0)
                if kind is not None:
                    msg = LAUNCH_ERRORS[kind].format(
                        type=itype, zone=kwargs.get("placement") or "", image=image_id
                    )
                    if group is None and launch < count:  # RunInstances: all of MinCount or none
                        raise LaunchRefused(_EC2_CODES[kind], msg)
                    for _ in range(count - launch):
                        state.activities.failed(group, at, msg)
                if left is not None:
                    state.capacity[key] = left - launch
            out = orig(backend, image_id, launch, user_data, security_group_names, **kwargs)
            if group is not None:
                with state.lock:
                    for inst in getattr(out, "instances", []):
                        state.activities.launched(group, at, inst.id)
            return out

        InstanceBackend.run_instances = run_instances  # type: ignore[method-assign,assignment]
        self._orig = orig

    def uninstall(self) -> None:
        if self._orig is None:
            return
        from moto.ec2.models.instances import InstanceBackend

        InstanceBackend.run_instances = self._orig  # type: ignore[method-assign]
        self._orig = None


class _ClockPatch:
    """Points moto's EC2 instance times at a clock (installed while one is set)."""

    def __init__(self) -> None:
        self._saved: Any = None

    def install(self, clock: CloudClock) -> None:
        import moto.ec2.models.instances as moto_instances

        mod: Any = moto_instances  # a module attribute, restored by uninstall
        if self._saved is None:
            self._saved = mod.utcnow
        mod.utcnow = lambda: clock().astimezone(UTC).replace(tzinfo=None)

    def uninstall(self) -> None:
        if self._saved is None:
            return
        import moto.ec2.models.instances as moto_instances

        mod: Any = moto_instances
        mod.utcnow = self._saved
        self._saved = None


def _handler_on(state: _State, base: type[Any]) -> type[Any]:
    """moto's request handler, with the `Date` header on the cloud's clock when one is set."""

    class Handler(base):  # type: ignore[misc,valid-type]
        def date_time_string(self, timestamp: float | None = None) -> str:
            clock = state.clock
            if timestamp is None and clock is not None:
                timestamp = clock().timestamp()
            return str(super().date_time_string(timestamp))

    return Handler


# The credentials and region every client of the stand-in uses (moto accepts any key unless
# IAM enforcement is on); AWS_PROFILE is dropped so no profile of the machine overrides them.
TEST_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class EnvPatch(Protocol):
    """What `use_test_credentials` needs of pytest's monkeypatch."""

    def setenv(self, name: str, value: str) -> None: ...

    def delenv(self, name: str, raising: bool = ...) -> None: ...


def use_test_credentials(env: EnvPatch) -> None:
    for k, v in TEST_CREDENTIALS.items():
        env.setenv(k, v)
    env.delenv("AWS_PROFILE", raising=False)


class FaultyMotoServer:
    """moto's server on 127.0.0.1 (a free port by default) behind the fault layer."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, *, clock: CloudClock | None = None
    ) -> None:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self.state = _State()
        app = FaultMiddleware(DomainDispatcherApplication(create_backend_app), self.state)
        handler = _handler_on(self.state, MotoRequestHandler)
        self._srv = make_server(host, port, app, threaded=True, request_handler=handler)
        self.endpoint = "http://{}:{}".format(*self._srv.server_address[:2])
        self._thread = threading.Thread(target=self._srv.serve_forever, daemon=True)
        self._patch = _CapacityPatch(self.state)
        self._clock_patch = _ClockPatch()
        self._initial_clock = clock

    def start(self) -> FaultyMotoServer:
        self._patch.install()
        self.use_clock(self._initial_clock)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._srv.shutdown()
        self._thread.join()
        self._patch.uninstall()
        self.use_clock(None)

    def use_clock(self, clock: CloudClock | None) -> None:
        """The cloud's clock from now on (None: the wall clock, moto's own)."""
        with self.state.lock:
            self.state.clock = clock
        if clock is None:
            self._clock_patch.uninstall()
        else:
            self._clock_patch.install(clock)

    def add_fault(self, action: str, code: str = "", **kw: Any) -> Fault:
        fault = Fault(action=action, code=code, **kw)
        with self.state.lock:
            self.state.faults.append(fault)
        return fault

    def set_capacity(self, region: str, instance_type: str, count: int) -> None:
        """From now on `region` can launch only `count` more `instance_type` instances."""
        with self.state.lock:
            self.state.capacity[(region, instance_type)] = count

    def set_launch_error(self, region: str, instance_type: str, kind: str | None) -> None:
        """From now on every launch of `instance_type` in `region` fails with AWS's message for
        `kind` (a key of `LAUNCH_ERRORS`; None: launches succeed again)."""
        if kind is not None and kind not in LAUNCH_ERRORS:
            raise InvalidArgument(f"launch error kind {kind!r}: not one of {sorted(LAUNCH_ERRORS)}")
        with self.state.lock:
            if kind is None:
                self.state.launch_errors.pop((region, instance_type), None)
            else:
                self.state.launch_errors[(region, instance_type)] = kind

    def set_result_delay(self, seconds: float) -> None:
        """Every launch's outcome is reported this long after it started (the stand-in's
        clock): `InProgress` until then, as a real group's is for tens of seconds."""
        with self.state.lock:
            self.state.activities.result_delay_s = seconds

    def serve_consoles(self, consoles: Callable[[str], str] | None) -> None:
        """Answer GetConsoleOutput with what each VM wrote to its console (the test hosts'
        hypervisor knows it; moto alone answers a canned text)."""
        self.state.consoles = consoles

    def warn_spot(self, instance_id: str, region: str, lead_s: float = NOTICE_S) -> None:
        """EC2's interruption notice for a spot instance: in its metadata from now (the
        stand-in's clock), and the instance taken `lead_s` later."""
        self.state.notices.warn(instance_id, region, self.state.now(), lead_s)

    def recommend_rebalance(self, instance_id: str, region: str) -> None:
        """EC2's rebalance recommendation for a spot instance, in its metadata from now."""
        self.state.notices.recommend_rebalance(instance_id, region, self.state.now())

    def take_due_spot(self) -> list[str]:
        """Take the warned instances whose time has come now (the layer also does it on every
        request); the ids taken."""
        return self.state.notices.carry_out(self.state.now())

    def hits(self, action: str) -> int:
        with self.state.lock:
            return self.state.hits.get(action, 0)

    def clear_faults(self) -> None:
        _clear(self.state)

    def reset(self) -> None:
        """Forget every AWS resource (moto's reset) and every fault and capacity limit."""
        req = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:  # loopback only
            resp.read()
        self.clear_faults()
        with self.state.lock:
            self.state.activities.clear()  # moto forgot the groups: their history goes too
        self.state.notices.clear()
        self.state.consoles = None


@contextlib.contextmanager
def iam_enforcing_moto(host: str = "127.0.0.1") -> Iterator[str]:
    """moto's server in a process of its own on `host` (its endpoint is yielded), with IAM
    enforced after the first three calls: those make the administrator, every later call is
    judged by the caller's IAM policy (moto's `INITIAL_NO_AUTH_ACTION_COUNT`)."""
    with socket.socket() as s:
        s.bind((host, 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
        env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:  # a real server starting: poll with a deadline
            try:
                socket.create_connection((host, port), timeout=1).close()
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise InvalidState(f"moto.server on {host}:{port} did not start") from exc
                time.sleep(0.1)
        yield f"http://{host}:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=5000)
    args = ap.parse_args(argv)
    srv = FaultyMotoServer(args.host, args.port).start()
    print(f"moto with faults listening on {srv.endpoint}", flush=True)
    srv._thread.join()


if __name__ == "__main__":
    main()
