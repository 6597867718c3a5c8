"""AWS adapter (boto3): launch template + auto scaling group per node group.

boto3 is imported lazily. Clients honour `AWS_ENDPOINT_URL` (or an explicit endpoint, e.g. moto's
server) and are built with botocore's own retries off (`total_max_attempts=1`): the one tenacity
policy in `retry.py` does the retrying. Errors are mapped from botocore error *codes*, never from
message text; the one exception is a failed scaling activity, whose reason AWS gives only as
text (`aws_activities.py`).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import email.utils
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from tenacity import Retrying

from provisioner.act.aws_activities import request_failure
from provisioner.act.ports import (
    NODE_KEY,
    TAG_CONTROLLER,
    TAG_SHAPE,
    ClockProbe,
    CloudState,
    GroupStatus,
    OwnedInstance,
    PoolSpec,
    check_target,
    request_token,
)
from provisioner.act.retry import call_mapped, cloud_retrying
from provisioner.act.shapes import (
    SUSPENDED_PROCESSES,
    aws_group_tags,
    aws_launch_template_data,
    aws_tag_list,
)
from provisioner.domain.errors import (
    AuthError,
    CapacityError,
    CloudError,
    NotFoundError,
    QuotaError,
    ThrottlingError,
    TransientError,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

ASG_NAME_TAG = "aws:autoscaling:groupName"

CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientCapacityOnHost",
        "SpotMaxPriceTooLow",
        "Unsupported",  # the instance type is not offered in the requested zone
    }
)
QUOTA_CODES = frozenset(
    {
        "InstanceLimitExceeded",
        "VcpuLimitExceeded",
        "MaxSpotInstanceCountExceeded",
        "LimitExceeded",  # autoscaling: too many groups / launch configurations
        "ResourceLimitExceeded",
        "LaunchTemplateLimitExceeded",
    }
)
THROTTLING_CODES = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "TooManyRequestsException",
        "RequestThrottled",
        "RequestThrottledException",
        "SlowDown",
        "PriorRequestNotComplete",
        "EC2ThrottledException",
        "ResourceContention",  # autoscaling: concurrent updates to the same group
    }
)
TRANSIENT_CODES = frozenset(
    {
        "InternalError",
        "InternalFailure",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "Unavailable",
        "ServerInternal",
        "RequestTimeout",
        "RequestTimeoutException",
        "ScalingActivityInProgress",
    }
)
AUTH_CODES = frozenset(
    {
        "AuthFailure",
        "UnauthorizedOperation",
        "AccessDenied",
        "AccessDeniedException",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "ExpiredTokenException",
        "UnrecognizedClientException",
        "MissingAuthenticationToken",
        "OptInRequired",
        "Blocked",
    }
)
ALREADY_EXISTS_CODES = frozenset(
    {"AlreadyExists", "InvalidLaunchTemplateName.AlreadyExistsException"}
)


def _is_not_found(code: str) -> bool:
    return code.endswith((".NotFound", "NotFoundException")) or code in ("NotFound", "NoSuchEntity")


def map_client_error(code: str, http_status: int, message: str, offer: str = "") -> CloudError:
    """The taxonomy for one botocore error code (message text is carried, never inspected)."""
    cls: type[CloudError]
    if code in CAPACITY_CODES:
        cls = CapacityError
    elif code in QUOTA_CODES:
        cls = QuotaError
    elif code in THROTTLING_CODES or http_status == 429:
        cls = ThrottlingError
    elif code in AUTH_CODES:
        cls = AuthError
    elif _is_not_found(code):
        cls = NotFoundError
    elif code in TRANSIENT_CODES or http_status >= 500:
        cls = TransientError
    else:
        cls = CloudError
    return cls(f"aws {code}: {message}", code=code, offer=offer)


def map_aws_error(exc: Exception, offer: str = "") -> CloudError:
    """Map any exception from boto3/botocore to the taxonomy."""
    if isinstance(exc, CloudError):
        return exc
    from botocore import exceptions as bex  # lazy: botocore is an optional extra

    if isinstance(exc, bex.ClientError):
        err = exc.response.get("Error", {})
        meta = exc.response.get("ResponseMetadata", {})
        return map_client_error(
            str(err.get("Code", "")),
            int(meta.get("HTTPStatusCode") or 0),
            str(err.get("Message", "")),
            offer,
        )
    if isinstance(exc, bex.NoCredentialsError | bex.PartialCredentialsError):
        return AuthError(f"aws credentials: {exc}", code="NoCredentials", offer=offer)
    if isinstance(
        exc,
        bex.EndpointConnectionError
        | bex.ConnectionClosedError
        | bex.ReadTimeoutError
        | bex.ConnectTimeoutError,
    ):
        return TransientError(f"aws connection: {exc}", code=type(exc).__name__, offer=offer)
    if isinstance(exc, bex.BotoCoreError):
        return CloudError(f"aws: {exc}", code=type(exc).__name__, offer=offer)
    from botocore.parsers import ResponseParserError

    if isinstance(exc, ResponseParserError):
        # a garbled answer (a proxy's error page, a 500 with no AWS body): the call may or may
        # not have taken effect, so it is retried like a lost connection, never fatal to a pass
        return TransientError(f"aws: unreadable response: {exc}"[:500], code="ResponseParserError",
                              offer=offer)  # fmt: skip
    raise exc


class AwsClients:
    """Builds and caches boto3 clients per (service, region)."""

    def __init__(
        self,
        endpoint_url: str | None = None,
        *,
        session: Any = None,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 30.0,
    ) -> None:
        self.endpoint_url = endpoint_url  # None: boto3 reads AWS_ENDPOINT_URL itself
        self._session = session
        self._timeouts = (connect_timeout_s, read_timeout_s)
        self._cache: dict[tuple[str, str], Any] = {}
        self._probe: ClockProbe | None = None

    @property
    def account(self) -> str:
        """The cloud account the skew is kept under: the session's profile."""
        return str(getattr(self._session, "profile_name", None) or "default")

    def watch_clock(self, probe: ClockProbe) -> None:
        """Report every answer's `Date` header to `probe` (clients made before and after)."""
        self._probe = probe
        for client in self._cache.values():
            _watch(client, probe)

    def client(self, service: str, region: str) -> Any:
        key = (service, region)
        if key not in self._cache:
            import boto3
            from botocore.config import Config

            cfg = Config(
                retries={"mode": "standard", "total_max_attempts": 1},
                connect_timeout=self._timeouts[0],
                read_timeout=self._timeouts[1],
                user_agent_extra="gpu-burst-provisioner",
            )
            session = self._session or boto3.session.Session()
            kwargs: dict[str, Any] = {"region_name": region, "config": cfg}
            if self.endpoint_url:
                kwargs["endpoint_url"] = self.endpoint_url
            self._cache[key] = session.client(service, **kwargs)
            if self._probe is not None:
                _watch(self._cache[key], self._probe)
        return self._cache[key]

    def ec2(self, region: str) -> Any:
        return self.client("ec2", region)

    def autoscaling(self, region: str) -> Any:
        return self.client("autoscaling", region)


class _AwsBase:
    def __init__(self, clients: AwsClients | None = None, retrying: Retrying | None = None) -> None:
        self.clients = clients or AwsClients()
        self.retrying = retrying or cloud_retrying()

    def _call(self, fn: Callable[..., T], offer: str = "", **kwargs: Any) -> T:
        """One SDK call under the retry policy, errors mapped to the taxonomy."""
        return call_mapped(self.retrying, lambda: fn(**kwargs), lambda e: map_aws_error(e, offer))

    def _find_group(self, spec: PoolSpec) -> dict[str, Any] | None:
        asg = self.clients.autoscaling(spec.region)
        out = self._call(
            asg.describe_auto_scaling_groups,
            str(spec.offer),
            AutoScalingGroupNames=[spec.group_name],
        )
        groups: list[dict[str, Any]] = out.get("AutoScalingGroups", [])
        return groups[0] if groups else None


class AwsPoolDriver(_AwsBase):
    """SDK `PoolDriver`: launch template + auto scaling group (min 0, max from policy)."""

    def ensure(self, spec: PoolSpec) -> None:
        lt_name = self._ensure_launch_template(spec)
        self._ensure_group(spec, lt_name)

    def _ensure_launch_template(self, spec: PoolSpec) -> str:
        ec2 = self.clients.ec2(spec.region)
        offer = str(spec.offer)
        name = spec.group_name
        data = aws_launch_template_data(spec)
        found = self._call(
            ec2.describe_launch_templates,
            offer,
            Filters=[{"Name": "launch-template-name", "Values": [name]}],
        ).get("LaunchTemplates", [])
        tags = {**spec.tags, TAG_SHAPE: spec.shape_hash}
        if not found:
            try:
                self._call(
                    ec2.create_launch_template,
                    offer,
                    LaunchTemplateName=name,
                    ClientToken=request_token("lt", name, spec.shape_hash),
                    LaunchTemplateData=data,
                    TagSpecifications=[
                        {"ResourceType": "launch-template", "Tags": aws_tag_list(tags)}
                    ],
                )
            except CloudError as exc:
                if exc.code not in ALREADY_EXISTS_CODES:  # a concurrent create won the race
                    raise
            return name
        lt = found[0]
        current = {t["Key"]: t["Value"] for t in lt.get("Tags", [])}
        if current.get(TAG_SHAPE) != spec.shape_hash:
            ver = self._call(
                ec2.create_launch_template_version,
                offer,
                LaunchTemplateId=lt["LaunchTemplateId"],
                ClientToken=request_token("ltv", name, spec.shape_hash),
                LaunchTemplateData=data,
            )["LaunchTemplateVersion"]["VersionNumber"]
            self._call(
                ec2.modify_launch_template,
                offer,
                LaunchTemplateId=lt["LaunchTemplateId"],
                DefaultVersion=str(ver),
            )
            self._call(
                ec2.create_tags,
                offer,
                Resources=[lt["LaunchTemplateId"]],
                Tags=aws_tag_list(tags),
            )
        return name

    def _ensure_group(self, spec: PoolSpec, lt_name: str) -> None:
        asg = self.clients.autoscaling(spec.region)
        offer = str(spec.offer)
        lt_ref = {"LaunchTemplateName": lt_name, "Version": "$Default"}
        group = self._find_group(spec)
        if group is None:
            placement: dict[str, Any]
            if spec.subnets:
                placement = {"VPCZoneIdentifier": ",".join(spec.subnets)}
            else:
                placement = {"AvailabilityZones": list(spec.zones) or [f"{spec.region}a"]}
            try:
                self._call(
                    asg.create_auto_scaling_group,
                    offer,
                    AutoScalingGroupName=spec.group_name,
                    LaunchTemplate=lt_ref,
                    MinSize=0,
                    MaxSize=spec.max_size,
                    DesiredCapacity=0,
                    Tags=aws_group_tags(spec),
                    # A rebalance recommendation is the controller's to act on (drain, then
                    # end), never a swap the group makes under a running job.
                    CapacityRebalance=False,
                    # A resize below the members (a shrink racing a launch) ends none of them;
                    # the controller ends members by name, which protection does not stop.
                    NewInstancesProtectedFromScaleIn=True,
                    **placement,
                )
            except CloudError as exc:
                if exc.code not in ALREADY_EXISTS_CODES:
                    raise
            self._suspend_autonomy(spec, asg, offer)
            return
        if {p["ProcessName"] for p in group.get("SuspendedProcesses", [])} < SUSPENDED_PROCESSES:
            self._suspend_autonomy(spec, asg, offer)  # a group made before this version
        if group.get("CapacityRebalance") or not group.get("NewInstancesProtectedFromScaleIn"):
            self._call(
                asg.update_auto_scaling_group,
                offer,
                AutoScalingGroupName=spec.group_name,
                CapacityRebalance=False,
                NewInstancesProtectedFromScaleIn=True,
            )
            unprotected = [
                i["InstanceId"]
                for i in group.get("Instances", [])
                if not i.get("ProtectedFromScaleIn")
            ]
            if unprotected:  # members an older version launched
                self._call(
                    asg.set_instance_protection,
                    offer,
                    InstanceIds=unprotected[:50],
                    AutoScalingGroupName=spec.group_name,
                    ProtectedFromScaleIn=True,
                )
        if group.get("MaxSize") != spec.max_size:
            # The desired size is the controller's business (CloudCapacity.resize), never here.
            self._call(
                asg.update_auto_scaling_group,
                offer,
                AutoScalingGroupName=spec.group_name,
                MaxSize=spec.max_size,
                LaunchTemplate=lt_ref,
            )

    def _suspend_autonomy(self, spec: PoolSpec, asg: Any, offer: str) -> None:
        """The processes by which a group ends or adds members on its own are suspended: the
        controller alone decides which instance ends (one whose node is drained)."""
        self._call(
            asg.suspend_processes,
            offer,
            AutoScalingGroupName=spec.group_name,
            ScalingProcesses=sorted(SUSPENDED_PROCESSES),
        )

    def delete(self, spec: PoolSpec) -> None:
        asg = self.clients.autoscaling(spec.region)
        ec2 = self.clients.ec2(spec.region)
        offer = str(spec.offer)
        if self._find_group(spec) is not None:
            with contextlib.suppress(NotFoundError):
                self._call(
                    asg.delete_auto_scaling_group,
                    offer,
                    AutoScalingGroupName=spec.group_name,
                    ForceDelete=True,
                )
        found = self._call(
            ec2.describe_launch_templates,
            offer,
            Filters=[{"Name": "launch-template-name", "Values": [spec.group_name]}],
        ).get("LaunchTemplates", [])
        for lt in found:
            with contextlib.suppress(NotFoundError):
                self._call(
                    ec2.delete_launch_template, offer, LaunchTemplateId=lt["LaunchTemplateId"]
                )


_EC2_STATES = {
    "pending": CloudState.PENDING,
    "running": CloudState.RUNNING,
    "stopping": CloudState.STOPPING,
    "shutting-down": CloudState.STOPPING,
    "stopped": CloudState.STOPPED,
    "terminated": CloudState.TERMINATED,
}
_GONE_LIFECYCLE = ("Terminating", "Terminating:Wait", "Terminating:Proceed", "Terminated")


class AwsCapacity(_AwsBase):
    """`CloudCapacity` over EC2 and EC2 Auto Scaling in the given regions."""

    cloud = "aws"

    def __init__(
        self,
        regions: Iterable[str],
        clients: AwsClients | None = None,
        retrying: Retrying | None = None,
    ) -> None:
        super().__init__(clients, retrying)
        self.regions = tuple(regions)
        # (region, group) -> the cloud's time of this process's latest resize of it
        self._asked: dict[tuple[str, str], datetime] = {}

    @property
    def account(self) -> str:
        return self.clients.account

    def watch_clock(self, probe: ClockProbe) -> None:
        self.clients.watch_clock(probe)

    def list_owned(self, controller: str) -> Sequence[OwnedInstance]:
        out: list[OwnedInstance] = []
        for region in self.regions:
            ec2 = self.clients.ec2(region)
            filters = [
                {"Name": f"tag:{TAG_CONTROLLER}", "Values": [controller]},
                {
                    # terminated ones too (EC2 lists them for about an hour): one the cloud
                    # reclaimed is known for certain, and one the store never recorded is
                    # still billed (see reconcile/sync.py)
                    "Name": "instance-state-name",
                    "Values": [
                        "pending",
                        "running",
                        "stopping",
                        "stopped",
                        "shutting-down",
                        "terminated",
                    ],
                },
            ]
            token: str | None = None
            while True:
                kwargs: dict[str, Any] = {"Filters": filters, "MaxResults": 500}
                if token:
                    kwargs["NextToken"] = token
                page = self._call(ec2.describe_instances, **kwargs)
                for res in page.get("Reservations", []):
                    for inst in res.get("Instances", []):
                        out.append(_owned(inst, region))
                token = page.get("NextToken")
                if not token:
                    break
        return out

    def group_status(self, spec: PoolSpec) -> GroupStatus:
        group = self._find_group(spec)
        if group is None:
            return GroupStatus(exists=False)
        launched = sum(
            1 for i in group.get("Instances", []) if i.get("LifecycleState") not in _GONE_LIFECYCLE
        )
        desired = int(group.get("DesiredCapacity", 0))
        failure = self._launch_failure(spec) if launched < desired else None
        return GroupStatus(exists=True, desired=desired, launched=launched, failure=failure)

    def _launch_failure(self, spec: PoolSpec) -> CloudError | None:
        """The failure AWS reported for the group's latest resize (see aws_activities)."""
        asg = self.clients.autoscaling(spec.region)
        acts = self._call(
            asg.describe_scaling_activities,
            str(spec.offer),
            AutoScalingGroupName=spec.group_name,
            MaxRecords=20,
        ).get("Activities", [])
        since = self._asked.get((spec.region, spec.group_name))
        if since is None and spec.requested_ts is not None:  # asked before a restart
            since = datetime.fromtimestamp(spec.requested_ts, UTC)
        return request_failure(acts, spec.group_name, since=since, offer=str(spec.offer))

    def resize(self, spec: PoolSpec, target: int, token: str) -> None:
        """SetDesiredCapacity is absolute, so it is idempotent without a token; the decision that
        asked for the size is written to the group's propagated `decision` tag first, so the new
        instances carry it."""
        asg = self.clients.autoscaling(spec.region)
        offer = str(spec.offer)
        check_target(spec, target)
        decision_tag = [t for t in aws_group_tags(spec) if t["Key"] == "decision"]
        self._call(asg.create_or_update_tags, offer, Tags=decision_tag)
        log.info("resize %s to %d (token %s)", spec.group_name, target, token)
        answer = self._call(
            asg.set_desired_capacity,
            offer,
            AutoScalingGroupName=spec.group_name,
            DesiredCapacity=target,
            HonorCooldown=False,
        )
        # When AWS took the request, on its own clock: only activities from then on are its
        # outcome (an earlier request's failure stays listed for weeks).
        asked = _answer_date(answer)
        if asked is not None:
            self._asked[(spec.region, spec.group_name)] = asked

    def name_node(self, instance: OwnedInstance, node: str) -> None:
        ec2 = self.clients.ec2(instance.region)
        self._call(
            ec2.create_tags,
            instance.instance_id,
            Resources=[instance.instance_id],
            Tags=[{"Key": NODE_KEY, "Value": node}],
        )

    def console_output(self, instance: OwnedInstance) -> str:
        """EC2's console output (`Latest`: the newest 64 KB, on instances that keep it;
        base64 on the wire, which botocore leaves as it is)."""
        ec2 = self.clients.ec2(instance.region)
        out = self._call(
            ec2.get_console_output, instance.instance_id, InstanceId=instance.instance_id
        )
        text = out.get("Output") or ""
        try:
            return base64.b64decode(text).decode("utf-8", "replace")
        except (ValueError, binascii.Error):
            return str(text)

    def terminate(self, instance: OwnedInstance, token: str) -> None:
        asg = self.clients.autoscaling(instance.region)
        ec2 = self.clients.ec2(instance.region)
        members = self._call(
            asg.describe_auto_scaling_instances, InstanceIds=[instance.instance_id]
        ).get("AutoScalingInstances", [])
        try:
            if members:
                self._call(
                    asg.terminate_instance_in_auto_scaling_group,
                    InstanceId=instance.instance_id,
                    ShouldDecrementDesiredCapacity=True,
                )
            else:
                self._call(ec2.terminate_instances, InstanceIds=[instance.instance_id])
                if instance.group:
                    self._release_slot(instance.instance_id, instance.group, instance.region)
        except NotFoundError:
            log.info("instance %s already gone", instance.instance_id)

    def _release_slot(self, instance_id: str, group_name: str, region: str) -> None:
        """The cloud terminated an instance of the group without the group shrinking (a spot
        reclaim): while the group still lists it, detach it with a decrement, so the group does
        not launch a replacement nobody asked for. Nothing else in the group is touched (a lower
        desired size would let the group pick which running instance to stop)."""
        asg = self.clients.autoscaling(region)
        groups = self._call(
            asg.describe_auto_scaling_groups, AutoScalingGroupNames=[group_name]
        ).get("AutoScalingGroups", [])
        members = [
            i
            for g in groups
            for i in g.get("Instances", [])
            if i.get("LifecycleState") not in _GONE_LIFECYCLE
        ]
        if instance_id in {i["InstanceId"] for i in members}:
            log.info("group %s: detach reclaimed %s (no replacement)", group_name, instance_id)
            self._call(asg.detach_instances, AutoScalingGroupName=group_name,
                       InstanceIds=[instance_id], ShouldDecrementDesiredCapacity=True)  # fmt: skip
            return
        desired = int(groups[0].get("DesiredCapacity", 0)) if groups else 0
        if desired > len(members):
            # the group dropped it but still owes a replacement: cancel that launch (never
            # below what the group holds, so no member is stopped)
            log.info("group %s: desired %d -> %d (a reclaimed slot)", group_name, desired,
                     len(members))  # fmt: skip
            self._call(asg.set_desired_capacity, AutoScalingGroupName=group_name,
                       DesiredCapacity=len(members), HonorCooldown=False)  # fmt: skip


_SENT = "gpu_burst_clock_sent"


def _watch(client: Any, probe: ClockProbe) -> None:
    """Hook a boto3 client: the controller's clock before each call, the answer's `Date` header
    after it (botocore emits after-call for error answers too)."""

    def before(context: dict[str, Any], **_: Any) -> None:
        context[_SENT] = probe.now()

    def after(http_response: Any, context: dict[str, Any], **_: Any) -> None:
        sent = context.get(_SENT)
        headers = getattr(http_response, "headers", None) or {}
        if sent is not None:
            probe.answered(str(headers.get("Date") or headers.get("date") or ""), sent, probe.now())

    client.meta.events.register("before-call", before)
    client.meta.events.register("after-call", after)


def _answer_date(answer: Any) -> datetime | None:
    """The `Date` header of a boto3 answer (the cloud's clock), or None."""
    headers = (answer or {}).get("ResponseMetadata", {}).get("HTTPHeaders", {})
    raw = str(headers.get("date") or "")
    try:
        return email.utils.parsedate_to_datetime(raw).astimezone(UTC) if raw else None
    except (TypeError, ValueError):
        return None


def _owned(inst: dict[str, Any], region: str) -> OwnedInstance:
    tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
    launch = inst.get("LaunchTime")
    iid = inst["InstanceId"]
    launched: float | None = None
    problem = ""
    if isinstance(launch, datetime):
        launched = (launch if launch.tzinfo else launch.replace(tzinfo=UTC)).timestamp()
    else:
        problem = f"aws instance {iid}: LaunchTime {launch!r} is not a time"
    return OwnedInstance(
        instance_id=iid,
        cloud="aws",
        region=region,
        zone=inst.get("Placement", {}).get("AvailabilityZone", ""),
        instance_type=inst.get("InstanceType", ""),
        state=_EC2_STATES.get(inst.get("State", {}).get("Name", ""), CloudState.PENDING),
        launched_ts=launched,
        group=tags.get(ASG_NAME_TAG, ""),
        tags=tags,
        ended_ts=_ended_ts(str(inst.get("StateTransitionReason") or "")),
        stamp_error=problem,
        private_ip=str(inst.get("PrivateIpAddress") or ""),
        named_node=tags.get(NODE_KEY, ""),
    )


_ENDED = re.compile(r"\((\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) (?:GMT|UTC)\)")


def _ended_ts(reason: str) -> float | None:
    """EC2 says when an instance stopped or terminated only in its StateTransitionReason:
    "User initiated (2026-03-02 00:12:00 GMT)", cut to the second. The end of that second is
    returned: the latest the instance can have stopped running (billing ends there at most a
    second late, never early)."""
    m = _ENDED.search(reason)
    if m is None:
        return None
    at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
    return at + 1.0
