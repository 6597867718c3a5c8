"""GCP adapter (google-cloud-compute, REST transport): instance template + regional MIG.

The SDK is imported lazily. Mutating calls use the `*_unary` methods with a `requestId` and then
wait on the operation through operations clients built with the *same* client options. (The
default `ExtendedOperation.result()` polls through clients the transport builds without the
configured endpoint, so against any non-default endpoint it polls compute.googleapis.com, and it
silently drops failed operations that carry no HTTP status.) `wait` blocks on the server, so no
polling loop sleeps here.

Errors are mapped from structured reasons and codes (`errors[].reason`, operation
`error.errors[].code`, the HTTP status), never from message text.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from tenacity import Retrying

from provisioner.act.ports import (
    NODE_KEY,
    TAG_CONTROLLER,
    ClockProbe,
    CloudState,
    GroupStatus,
    OwnedInstance,
    PartialListing,
    PoolSpec,
    check_target,
    request_token,
)
from provisioner.act.retry import call_mapped, cloud_retrying
from provisioner.act.shapes import (
    gcp_group_body,
    gcp_template_body,
    gcp_template_name,
    gcp_zone_name,
)
from provisioner.domain.errors import (
    AuthError,
    CapacityError,
    CloudError,
    LaunchError,
    LaunchSpecError,
    NotFoundError,
    QuotaError,
    ThrottlingError,
    TransientError,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

CAPACITY_CODES = frozenset(
    {
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "REGION_RESOURCE_POOL_EXHAUSTED",
        "RESOURCE_POOL_EXHAUSTED",
        "resourcePoolExhausted",
    }
)
QUOTA_CODES = frozenset({"QUOTA_EXCEEDED", "quotaExceeded", "QUOTA_LIMIT_EXCEEDED"})
THROTTLING_CODES = frozenset(
    {
        "rateLimitExceeded",
        "userRateLimitExceeded",
        "RATE_LIMIT_EXCEEDED",
        "RESOURCE_OPERATION_RATE_EXCEEDED",
    }
)
NOT_FOUND_CODES = frozenset({"notFound", "RESOURCE_NOT_FOUND"})
ALREADY_EXISTS_CODES = frozenset({"alreadyExists", "RESOURCE_ALREADY_EXISTS"})
TRANSIENT_CODES = frozenset({"backendError", "internalError", "INTERNAL_ERROR"})
ALREADY_EXISTS = "alreadyExists"

_STATES = {
    "PROVISIONING": CloudState.PENDING,
    "STAGING": CloudState.PENDING,
    "RUNNING": CloudState.RUNNING,
    "STOPPING": CloudState.STOPPING,
    "SUSPENDING": CloudState.STOPPING,
    "REPAIRING": CloudState.STOPPING,
    "STOPPED": CloudState.STOPPED,
    "SUSPENDED": CloudState.STOPPED,
    "TERMINATED": CloudState.STOPPED,  # GCE's TERMINATED is "stopped"; deleted VMs vanish
}
_LIVE = ("PROVISIONING", "STAGING", "RUNNING")


def map_gcp_codes(
    codes: Iterable[str], http_status: int, message: str, offer: str = ""
) -> CloudError:
    """The taxonomy from GCE reasons/codes and the HTTP status (message text is never read)."""
    found = set(codes)
    cls: type[CloudError]
    code = next(iter(sorted(found)), str(http_status or ""))
    if found & CAPACITY_CODES:
        cls, code = CapacityError, sorted(found & CAPACITY_CODES)[0]
    elif found & QUOTA_CODES:
        cls, code = QuotaError, sorted(found & QUOTA_CODES)[0]
    elif found & THROTTLING_CODES or http_status == 429:
        cls = ThrottlingError
    elif found & NOT_FOUND_CODES or http_status == 404:
        cls = NotFoundError
    elif found & ALREADY_EXISTS_CODES or http_status == 409:
        cls, code = CloudError, ALREADY_EXISTS
    elif http_status in (401, 403):
        cls = AuthError
    elif found & TRANSIENT_CODES or http_status >= 500:
        cls = TransientError
    else:
        cls = CloudError
    return cls(f"gcp {code}: {message}", code=code, offer=offer)


def launch_failure(codes: Iterable[str], message: str, offer: str = "") -> CloudError:
    """Why a managed instance was not created (its `lastAttempt.errors`). In this place a
    missing resource or an invalid field is the template's fault (an image that does not
    exist, a machine type the zone lacks), not an instance already gone; and a code of no
    finer class is still a failed launch, backed off rather than asked again every pass."""
    found = set(codes)
    err = map_gcp_codes(found, 0, message, offer)
    if isinstance(err, NotFoundError) or any(
        c.startswith(("INVALID", "UNSUPPORTED")) for c in found
    ):
        return LaunchSpecError(str(err), code=err.code, offer=offer)
    if any("PERMISSION" in c for c in found):
        return AuthError(str(err), code=err.code, offer=offer)
    if type(err) is CloudError:
        return LaunchError(str(err), code=err.code, offer=offer)
    return err


def _reasons(errors: Iterable[Any]) -> list[str]:
    out: list[str] = []
    for e in errors:
        if isinstance(e, dict):
            out += [str(e[k]) for k in ("reason", "code") if e.get(k)]
        else:
            out += [str(getattr(e, k)) for k in ("reason", "code") if getattr(e, k, None)]
    return out


def map_gcp_error(exc: Exception, offer: str = "") -> CloudError:
    """Map an exception from google-api-core / google-auth / requests to the taxonomy."""
    if isinstance(exc, CloudError):
        return exc
    from google.api_core import exceptions as gexc

    if isinstance(exc, gexc.GoogleAPICallError):
        codes = _reasons(exc.errors or ())
        if exc.reason:
            codes.append(str(exc.reason))
        status = int(exc.code) if isinstance(exc.code, int) else 0
        return map_gcp_codes(codes, status, exc.message or str(exc), offer)
    if isinstance(exc, gexc.RetryError):
        return TransientError(f"gcp: {exc}", code="RetryError", offer=offer)
    from google.auth import exceptions as aexc

    if isinstance(exc, aexc.GoogleAuthError):
        return AuthError(f"gcp credentials: {exc}", code=type(exc).__name__, offer=offer)
    import requests

    if isinstance(exc, requests.ConnectionError | requests.Timeout):
        return TransientError(f"gcp connection: {exc}", code=type(exc).__name__, offer=offer)
    raise exc


def operation_error(op: Any, offer: str = "") -> CloudError | None:
    """The error a finished Operation carries (codes + HTTP status), if any."""
    errors = list(op.error.errors) if op.error else []
    status = int(op.http_error_status_code or 0)
    if not errors and status < 400:
        return None
    msg = "; ".join(e.message for e in errors) or op.http_error_message
    return map_gcp_codes(_reasons(errors), status, msg, offer)


class GcpClients:
    """Builds google-cloud-compute REST clients, all with the same endpoint and credentials."""

    def __init__(
        self,
        project: str,
        endpoint: str | None = None,
        *,
        credentials: Any = None,
        max_waits: int = 60,
    ) -> None:
        self.project = project
        self.endpoint = endpoint
        self.credentials = credentials
        self.max_waits = max_waits  # each `wait` blocks up to ~2 minutes on GCE
        self._cache: dict[str, Any] = {}
        self._probe: ClockProbe | None = None

    def watch_clock(self, probe: ClockProbe) -> None:
        """Report every answer's `Date` header to `probe` (clients made before and after)."""
        self._probe = probe
        for client in self._cache.values():
            _watch(client, probe)

    def _make(self, name: str) -> Any:
        if name not in self._cache:
            from google.api_core.client_options import ClientOptions
            from google.cloud import compute_v1

            kwargs: dict[str, Any] = {"transport": "rest"}
            if self.credentials is not None:
                kwargs["credentials"] = self.credentials
            if self.endpoint:
                kwargs["client_options"] = ClientOptions(api_endpoint=self.endpoint)
            self._cache[name] = getattr(compute_v1, name)(**kwargs)
            if self._probe is not None:
                _watch(self._cache[name], self._probe)
        return self._cache[name]

    def templates(self) -> Any:
        return self._make("InstanceTemplatesClient")

    def groups(self) -> Any:
        return self._make("RegionInstanceGroupManagersClient")

    def instances(self) -> Any:
        return self._make("InstancesClient")

    def compute(self, kind: str) -> Any:
        """Any other Compute client by its class name (`ImagesClient`, `FirewallsClient`, ...),
        with the same endpoint and credentials: the field preflight reads these."""
        return self._make(kind)

    def wait(self, op: Any) -> Any:
        """Wait on an Operation through our own operations clients until it is DONE."""
        from google.cloud import compute_v1

        done = compute_v1.Operation.Status.DONE
        for _ in range(self.max_waits):
            if op.status == done:
                return op
            if op.zone:
                op = self._make("ZoneOperationsClient").wait(
                    project=self.project, zone=gcp_zone_name(op.zone), operation=op.name
                )
            elif op.region:
                op = self._make("RegionOperationsClient").wait(
                    project=self.project, region=gcp_zone_name(op.region), operation=op.name
                )
            else:
                op = self._make("GlobalOperationsClient").wait(
                    project=self.project, operation=op.name
                )
        if op.status != done:
            raise TransientError(f"gcp operation {op.name} not done", code="OperationTimeout")
        return op


class _GcpBase:
    def __init__(self, clients: GcpClients, retrying: Retrying | None = None) -> None:
        self.clients = clients
        self.retrying = retrying or cloud_retrying()

    def _project(self, spec: PoolSpec | None = None) -> str:
        return (spec.project if spec is not None else "") or self.clients.project

    def _call(self, fn: Callable[[], T], offer: str = "") -> T:
        return call_mapped(self.retrying, fn, lambda e: map_gcp_error(e, offer))

    def _mutate(self, fn: Callable[[], Any], offer: str = "") -> None:
        """A mutating call plus its operation, retried as one unit (the requestId inside `fn`
        makes a retried call return the first operation instead of doing the change twice)."""

        def done() -> None:
            err = operation_error(self.clients.wait(fn()), offer)
            if err is not None:
                raise err

        self._call(done, offer)

    def _get_group(self, spec: PoolSpec) -> Any | None:
        groups = self.clients.groups()
        try:
            return self._call(
                lambda: groups.get(
                    project=self._project(spec),
                    region=spec.region,
                    instance_group_manager=spec.group_name,
                ),
                str(spec.offer),
            )
        except NotFoundError:
            return None


class GcpPoolDriver(_GcpBase):
    """SDK `PoolDriver`: a global instance template per shape + a regional MIG at size 0.

    GCE MIGs have no maximum size; `GcpCapacity.resize` enforces the pool's max instead."""

    def ensure(self, spec: PoolSpec) -> None:
        from google.cloud import compute_v1

        project, offer = self._project(spec), str(spec.offer)
        tname = gcp_template_name(spec)
        tlink = f"projects/{project}/global/instanceTemplates/{tname}"
        templates, groups = self.clients.templates(), self.clients.groups()
        try:
            self._call(lambda: templates.get(project=project, instance_template=tname), offer)
        except NotFoundError:
            body = compute_v1.InstanceTemplate.from_json(json.dumps(gcp_template_body(spec)))
            req = compute_v1.InsertInstanceTemplateRequest(
                project=project,
                instance_template_resource=body,
                request_id=request_token("tpl", project, tname),
            )
            self._ignore_exists(lambda: self._mutate(lambda: templates.insert_unary(req), offer))
        group = self._get_group(spec)
        if group is None:
            body = compute_v1.InstanceGroupManager.from_json(
                json.dumps(gcp_group_body(spec, tlink))
            )
            greq = compute_v1.InsertRegionInstanceGroupManagerRequest(
                project=project,
                region=spec.region,
                instance_group_manager_resource=body,
                request_id=request_token("mig", project, spec.group_name),
            )
            self._ignore_exists(lambda: self._mutate(lambda: groups.insert_unary(greq), offer))
        elif gcp_zone_name(group.instance_template) != tname:
            sreq = compute_v1.SetInstanceTemplateRegionInstanceGroupManagerRequest(
                project=project,
                region=spec.region,
                instance_group_manager=spec.group_name,
                region_instance_group_managers_set_template_request_resource=(
                    compute_v1.RegionInstanceGroupManagersSetTemplateRequest(
                        instance_template=tlink
                    )
                ),
                request_id=request_token("set-tpl", project, spec.group_name, tname),
            )
            self._mutate(lambda: groups.set_instance_template_unary(sreq), offer)

    @staticmethod
    def _ignore_exists(fn: Callable[[], None]) -> None:
        try:
            fn()
        except CloudError as exc:
            if exc.code != ALREADY_EXISTS:
                raise

    def delete(self, spec: PoolSpec) -> None:
        from google.cloud import compute_v1

        project, offer = self._project(spec), str(spec.offer)
        templates, groups = self.clients.templates(), self.clients.groups()
        names = {gcp_template_name(spec)}
        group = self._get_group(spec)
        if group is not None:
            names.add(gcp_zone_name(group.instance_template))
            req = compute_v1.DeleteRegionInstanceGroupManagerRequest(
                project=project,
                region=spec.region,
                instance_group_manager=spec.group_name,
                request_id=request_token("del-mig", project, spec.group_name, group.id),
            )
            with contextlib.suppress(NotFoundError):
                self._mutate(lambda: groups.delete_unary(req), offer)
        for name in sorted(names):
            treq = compute_v1.DeleteInstanceTemplateRequest(
                project=project,
                instance_template=name,
                request_id=request_token("del-tpl", project, name),
            )
            with contextlib.suppress(NotFoundError):
                self._mutate(lambda r=treq: templates.delete_unary(r), offer)  # type: ignore[misc]


class GcpCapacity(_GcpBase):
    """`CloudCapacity` over Compute Engine regional managed instance groups."""

    cloud = "gcp"

    @property
    def account(self) -> str:
        """The cloud account the skew is kept under: the project."""
        return self.clients.project

    def watch_clock(self, probe: ClockProbe) -> None:
        self.clients.watch_clock(probe)

    def list_owned(self, controller: str) -> Sequence[OwnedInstance]:
        from google.cloud import compute_v1

        instances = self.clients.instances()
        req = compute_v1.AggregatedListInstancesRequest(
            project=self.clients.project,
            filter=f'labels.{TAG_CONTROLLER} = "{controller}"',
            return_partial_success=True,
        )

        def fetch() -> list[OwnedInstance]:
            out: list[OwnedInstance] = []
            unreachable: set[str] = set()
            for page in instances.aggregated_list(request=req).pages:
                unreachable.update(str(u) for u in page.unreachables)
                for scope, scoped in page.items.items():
                    if scoped.warning and _is_unreachable(scoped.warning.code):
                        unreachable.add(scope)
                    for inst in scoped.instances:
                        out.append(_owned(inst, gcp_zone_name(scope)))
            if unreachable:
                # The VMs of those zones are not listed, not gone: a partial answer must
                # never close their records or fail their nodes. What did answer is real.
                raise PartialListing(
                    f"gcp: instances listed in part, unreachable: {', '.join(sorted(unreachable))}",
                    out,
                    code="UNREACHABLE",
                )
            return out

        return self._call(fetch)

    def _zone_of(self, name: str) -> str | None:
        """The zone an instance of this project runs in (None: no zone lists it)."""
        from google.cloud import compute_v1

        instances = self.clients.instances()
        req = compute_v1.AggregatedListInstancesRequest(
            project=self.clients.project, filter=f'name = "{name}"'
        )
        return self._call(lambda: _zone_named(instances.aggregated_list(request=req).pages, name))

    def group_status(self, spec: PoolSpec) -> GroupStatus:
        group = self._get_group(spec)
        if group is None:
            return GroupStatus(exists=False)
        groups = self.clients.groups()
        project, offer = self._project(spec), str(spec.offer)
        managed = self._call(
            lambda: list(
                groups.list_managed_instances(
                    project=project, region=spec.region, instance_group_manager=spec.group_name
                )
            ),
            offer,
        )
        launched = sum(1 for m in managed if m.instance_status in _LIVE)
        failure: CloudError | None = None
        for m in managed:
            errs = list(m.last_attempt.errors.errors) if m.last_attempt else []
            if m.instance_status not in _LIVE and errs:
                failure = launch_failure(_reasons(errs), errs[0].message, offer)
                break
        return GroupStatus(
            exists=True, desired=int(group.target_size), launched=launched, failure=failure
        )

    def resize(self, spec: PoolSpec, target: int, token: str) -> None:
        from google.cloud import compute_v1

        check_target(spec, target)
        groups = self.clients.groups()
        req = compute_v1.ResizeRegionInstanceGroupManagerRequest(
            project=self._project(spec),
            region=spec.region,
            instance_group_manager=spec.group_name,
            size=target,
            request_id=token,
        )
        log.info("resize %s to %d (request %s)", spec.group_name, target, token)
        self._mutate(lambda: groups.resize_unary(req), str(spec.offer))

    def name_node(self, instance: OwnedInstance, node: str) -> None:
        """setMetadata with the fingerprint just read: a concurrent change makes GCE refuse
        (412), and the next pass names it again."""
        from google.cloud import compute_v1

        project = self.clients.project
        vms = self.clients.instances()
        current = self._call(
            lambda: vms.get(project=project, zone=instance.zone, instance=instance.instance_id)
        )
        items = [
            compute_v1.Items(key=i.key, value=i.value)
            for i in current.metadata.items
            if i.key != NODE_KEY
        ]
        items.append(compute_v1.Items(key=NODE_KEY, value=node))
        req = compute_v1.SetMetadataInstanceRequest(
            project=project,
            zone=instance.zone,
            instance=instance.instance_id,
            metadata_resource=compute_v1.Metadata(
                fingerprint=current.metadata.fingerprint, items=items
            ),
        )
        self._mutate(lambda: vms.set_metadata_unary(req), instance.instance_id)

    def console_output(self, instance: OwnedInstance) -> str:
        """The VM's first serial port (its console), as GCE keeps it (the newest 1 MB)."""
        from google.cloud import compute_v1

        vms = self.clients.instances()
        req = compute_v1.GetSerialPortOutputInstanceRequest(
            project=self.clients.project, zone=instance.zone, instance=instance.instance_id, port=1
        )
        out = self._call(lambda: vms.get_serial_port_output(request=req), instance.instance_id)
        return str(out.contents or "")

    def terminate(self, instance: OwnedInstance, token: str) -> None:
        from google.cloud import compute_v1

        project = self.clients.project
        if not instance.zone:
            # A record without its zone (an old intent): `zones//instances/x` addresses
            # nothing and the group skips it without a word, so find where it runs.
            zone = self._zone_of(instance.instance_id)
            if zone is None:
                log.info("instance %s already gone (no zone lists it)", instance.instance_id)
                return
            instance = replace(instance, zone=zone)
        try:
            if instance.group:
                groups = self.clients.groups()
                req = compute_v1.DeleteInstancesRegionInstanceGroupManagerRequest(
                    project=project,
                    region=instance.region,
                    instance_group_manager=instance.group,
                    region_instance_group_managers_delete_instances_request_resource=(
                        compute_v1.RegionInstanceGroupManagersDeleteInstancesRequest(
                            instances=[f"zones/{instance.zone}/instances/{instance.instance_id}"],
                            skip_instances_on_validation_error=True,
                        )
                    ),
                    request_id=token,
                )
                self._mutate(lambda: groups.delete_instances_unary(req))
            else:
                instances = self.clients.instances()
                dreq = compute_v1.DeleteInstanceRequest(
                    project=project,
                    zone=instance.zone,
                    instance=instance.instance_id,
                    request_id=token,
                )
                self._mutate(lambda: instances.delete_unary(dreq))
        except NotFoundError:
            log.info("instance %s already gone", instance.instance_id)


def _zone_named(pages: Any, name: str) -> str | None:
    for page in pages:
        for scope, scoped in page.items.items():
            if any(inst.name == name for inst in scoped.instances):
                return gcp_zone_name(scope)
    return None


def _is_unreachable(code: Any) -> bool:
    """A scoped list's warning code (proto-plus gives the enum's name or its number)."""
    from google.cloud import compute_v1

    unreachable = compute_v1.Warning.Code.UNREACHABLE
    return str(code) in ("UNREACHABLE", str(int(unreachable)), str(unreachable))


def _watch(client: Any, probe: ClockProbe) -> None:
    """Hook a REST client's HTTP session: each answer's `Date` header, with the controller's
    clock when it arrived and that less the request's round trip (requests' `elapsed`, on a
    monotonic clock). The session is the transport's own (`_session`): a client without one
    reports nothing, and the skew is then measured from launch stamps alone."""
    session = getattr(getattr(client, "_transport", None), "_session", None)
    hooks = getattr(session, "hooks", None)
    if not isinstance(hooks, dict):
        log.warning("gcp client %s: no HTTP session to read Date headers from", type(client))
        return

    def answered(response: Any, *_: Any, **__: Any) -> Any:
        received = probe.now()
        elapsed = getattr(response, "elapsed", None)
        spent = elapsed.total_seconds() if elapsed is not None else 0.0
        probe.answered(str(response.headers.get("Date") or ""), received - spent, received)
        return response

    hooks.setdefault("response", []).append(answered)


def _stamp(inst: Any, field: str) -> tuple[float | None, str]:
    """An RFC 3339 stamp of the instance (GCE answers them as text), or why it has none."""
    raw = getattr(inst, field, "") or ""
    if not raw:
        return None, ""
    try:
        when = datetime.fromisoformat(str(raw))
    except ValueError:
        return None, f"gcp instance {inst.name}: {field} {raw!r} is not an RFC 3339 time"
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp(), ""


def _owned(inst: Any, zone: str) -> OwnedInstance:
    labels = dict(inst.labels)
    meta = {i.key: i.value for i in inst.metadata.items} if inst.metadata else {}
    created_by = meta.get("created-by", "")
    group = gcp_zone_name(created_by) if "/instanceGroupManagers/" in created_by else ""
    # GCE bills a VM from when it is RUNNING (lastStartTimestamp), not from its creation; an
    # answer without that stamp falls back to creationTimestamp (earlier: billed no less).
    launched, problem = _stamp(inst, "last_start_timestamp")
    if launched is None:
        launched, created_problem = _stamp(inst, "creation_timestamp")
        problem = problem or created_problem
        if launched is None and not problem:
            problem = f"gcp instance {inst.name}: no creationTimestamp"
    return OwnedInstance(
        instance_id=inst.name,
        cloud="gcp",
        region=zone.rsplit("-", 1)[0],
        zone=zone,
        instance_type=gcp_zone_name(inst.machine_type),
        state=_STATES.get(inst.status, CloudState.PENDING),
        launched_ts=launched,
        group=group,
        tags=labels,
        stamp_error=problem if launched is None else "",
        private_ip=_private_ip(inst),
        named_node=meta.get(NODE_KEY, ""),
    )


def _private_ip(inst: Any) -> str:
    nics = list(getattr(inst, "network_interfaces", None) or [])
    return str(getattr(nics[0], "network_i_p", "") or "") if nics else ""
