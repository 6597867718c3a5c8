"""The act-side ports: what a node group looks like, and the two tiny interfaces to a cloud.

A pool (from `policies/pools.yaml`) becomes one concrete node group per (region, instance type,
capacity type) it uses: an auto scaling group on AWS, a regional managed instance group on GCP.
`PoolSpec` describes one such group; `PoolDriver` creates or deletes its shape (Pulumi or the SDK);
`CloudCapacity` lists, resizes and terminates what runs in it. Adapters raise only the `CloudError`
taxonomy of `provisioner.domain.errors`.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from provisioner.domain.errors import CloudError, InvalidArgument, ListingIncomplete
from provisioner.domain.offers import CapacityType, OfferKey

if TYPE_CHECKING:
    from provisioner.act.field_preflight import FieldPreflight

# Tag (AWS) / label (GCP) keys every resource carries. GCP label keys and values allow only
# lowercase letters, digits, "-" and "_", so the same keys work on both clouds.
TAG_CONTROLLER = "controller"
TAG_POOL = "pool"
TAG_TEAM = "team"
TAG_DECISION = "decision"
TAG_GROUP = "group"
TAG_WORKLOAD = "workload"
TAG_CAPACITY = "capacity"
COST_TAGS = (TAG_CONTROLLER, TAG_POOL, TAG_TEAM, TAG_DECISION)
# On AWS launch templates only: the spec's `shape_hash`, so either driver sees a shape change.
TAG_SHAPE = "shape"
UNASSIGNED_TEAM = "unassigned"
# The per-instance tag (AWS) / instance attribute (GCE) that names the instance's Slurm node.
NODE_KEY = "slurm-node"

# Called at each step where a crash matters, with the step's name (tests raise or SIGKILL there).
Hook = Callable[[str], None]

_NAME_MAX = 63  # GCP resource names and label values; AWS allows more
_UNSAFE = re.compile(r"[^a-z0-9-]+")


def safe_name(text: str, max_len: int = _NAME_MAX) -> str:
    """A lowercase RFC 1035 name (what GCP requires), hash-suffixed when it has to be cut."""
    name = _UNSAFE.sub("-", text.lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"g-{name}"
    if len(name) > max_len:
        digest = hashlib.sha1(text.encode()).hexdigest()[:8]
        name = f"{name[: max_len - 9].rstrip('-')}-{digest}"
    return name


def label_value(text: str) -> str:
    """A GCP label value (also a fine AWS tag value): lowercase, [a-z0-9_-], at most 63 chars."""
    value = re.sub(r"[^a-z0-9_-]+", "-", text.lower()).strip("-")
    return value[:_NAME_MAX]


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """One concrete node group of a pool: what the drivers create and the adapters resize."""

    pool: str
    cloud: str
    region: str
    instance_type: str
    capacity: CapacityType
    gpu_model: str
    gpus: int
    max_size: int
    image: str
    controller: str
    team: str = ""
    decision_id: str = ""
    workload: str = "batch"
    user_data: str = ""
    zones: tuple[str, ...] = ()
    subnets: tuple[str, ...] = ()  # AWS: subnet ids for the group (else `zones`)
    security_groups: tuple[str, ...] = ()  # AWS
    network: str = "global/networks/default"  # GCP
    subnetwork: str = ""  # GCP: regions/<region>/subnetworks/<name> ("" = the network's own)
    network_tags: tuple[str, ...] = ()  # GCP: what firewall rules match the VMs by
    project: str = ""  # GCP
    disk_gb: int = 200
    root_device: str = "/dev/sda1"  # AWS: the AMI's root device name
    # The VM's own identity, what it reads secrets with (never a key in user-data): an IAM
    # instance profile (AWS, name or ARN) or a service account e-mail (GCP).
    instance_profile: str = ""
    service_account: str = ""
    # When the resize a launch outcome answers was asked for, on the cloud's clock, where the
    # adapter does not remember it itself (a controller that restarted): no earlier outcome
    # is this request's. None: unknown.
    requested_ts: float | None = None
    # A MIG pool's layout, which the VM sets before slurmd starts: `mig_per_gpu` devices of
    # `mig_profile` on every GPU ("" / 0: whole GPUs)
    mig_profile: str = ""
    mig_per_gpu: int = 0

    def __post_init__(self) -> None:
        if self.cloud not in ("aws", "gcp"):
            raise InvalidArgument(f"pool {self.pool}: unknown cloud {self.cloud!r}")
        if self.max_size < 0 or self.gpus < 0:
            raise InvalidArgument(f"pool {self.pool}: max_size and gpus must be >= 0")

    @property
    def offer(self) -> OfferKey:
        return OfferKey(self.cloud, self.region, self.instance_type, self.capacity)

    @property
    def spot(self) -> bool:
        return self.capacity is CapacityType.SPOT

    @property
    def group_name(self) -> str:
        """Stable across scale-ups and shape changes: one group per offer of a pool."""
        cap = "spot" if self.spot else "od"
        return safe_name(f"{self.controller}-{self.pool}-{self.region}-{self.instance_type}-{cap}")

    @property
    def tags(self) -> dict[str, str]:
        """Every resource of the group carries these (cost allocation, ownership, sweeping)."""
        return {
            TAG_CONTROLLER: label_value(self.controller),
            TAG_POOL: label_value(self.pool),
            TAG_TEAM: label_value(self.team) or UNASSIGNED_TEAM,
            TAG_DECISION: label_value(self.decision_id) or "none",
            TAG_GROUP: self.group_name,
            TAG_WORKLOAD: label_value(self.workload),
            TAG_CAPACITY: "spot" if self.spot else "on-demand",
        }

    @property
    def shape_hash(self) -> str:
        """Changes when the node shape changes (not when the decision or max size does)."""
        parts = (
            self.cloud,
            self.region,
            self.instance_type,
            self.capacity.value,
            self.gpu_model,
            str(self.gpus),
            self.image,
            self.user_data,
            ",".join(self.zones),
            ",".join(self.subnets),
            ",".join(self.security_groups),
            self.network,
            self.subnetwork,
            ",".join(self.network_tags),
            str(self.disk_gb),
            self.root_device,
            self.team,
            self.workload,
            self.instance_profile,
            self.service_account,
        )
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


def request_token(*parts: object) -> str:
    """A deterministic idempotency token (a UUID, which GCP's requestId requires).

    Built from the decision and the intended change, so a retry after a crash sends the same token
    and the cloud does the change once.
    """
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "gpu-burst:" + "|".join(map(str, parts))))


def check_target(spec: PoolSpec, target: int) -> None:
    """Refuse a resize past the pool's max (GCE MIGs have no max of their own)."""
    if target > spec.max_size:
        raise CloudError(
            f"{spec.group_name}: target {target} exceeds max {spec.max_size}",
            code="ValidationError",
            offer=str(spec.offer),
        )


class CloudState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    TERMINATED = "terminated"

    @property
    def alive(self) -> bool:
        return self in (CloudState.PENDING, CloudState.RUNNING)


@dataclass(frozen=True, slots=True)
class OwnedInstance:
    """A cloud instance found by this controller's tags (the truth the store is synced from)."""

    instance_id: str  # AWS instance id, GCP instance name
    cloud: str
    region: str
    zone: str
    instance_type: str
    state: CloudState
    # The cloud's own stamps, on the cloud's clock (evidence: the controller translates them by
    # the measured skew and clamps them into what it saw). None: the cloud gave none it could
    # read (`stamp_error` names the instance and the field).
    launched_ts: float | None
    group: str = ""  # the node group it belongs to ("" for a stray instance)
    tags: Mapping[str, str] = field(default_factory=dict)
    ended_ts: float | None = None  # when the cloud terminated it, where it says
    stamp_error: str = ""
    private_ip: str = ""  # the cloud's own answer ("" while it has none): the node's NodeAddr
    named_node: str = ""  # the Slurm node named on it (`name_node`), "" while none is

    @property
    def controller(self) -> str:
        return self.tags.get(TAG_CONTROLLER, "")

    @property
    def pool(self) -> str:
        return self.tags.get(TAG_POOL, "")


class PartialListing(ListingIncomplete):
    """A listing answered in part: `listed` is what the reachable part holds. Those instances
    are real (their records may follow them); the missing part's may still run and cost."""

    def __init__(self, message: str, listed: Sequence[OwnedInstance], *, code: str = "") -> None:
        super().__init__(message, code=code)
        self.listed = tuple(listed)


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """What a node group holds now. `failure` is a launch failure the cloud reported for the
    shortfall (GCP: a managed instance's lastAttempt error; AWS: a failed scaling activity)."""

    exists: bool
    desired: int = 0
    launched: int = 0
    failure: CloudError | None = None

    @property
    def shortfall(self) -> int:
        return max(0, self.desired - self.launched)


class PoolDriver(Protocol):
    """Creates a node group with its shape (template + group, min 0, max from policy) or deletes
    it. Never changes the group's size: that is `CloudCapacity.resize`."""

    def ensure(self, spec: PoolSpec) -> None: ...

    def delete(self, spec: PoolSpec) -> None: ...


class ClockProbe(Protocol):
    """Where a cloud adapter reports its answers' HTTP `Date` headers, with the controller's
    clock around each call: the evidence the cloud's skew is measured from."""

    def now(self) -> float:
        """The controller's clock (a call's send and receive times)."""
        ...

    def answered(self, date_header: str, sent_ts: float, received_ts: float) -> None: ...


class CloudCapacity(Protocol):
    """Instances in a cloud: list what we own, resize a group, terminate one instance."""

    cloud: str

    def list_owned(self, controller: str) -> Sequence[OwnedInstance]: ...

    def group_status(self, spec: PoolSpec) -> GroupStatus: ...

    def resize(self, spec: PoolSpec, target: int, token: str) -> None: ...

    def name_node(self, instance: OwnedInstance, node: str) -> None:
        """Name the Slurm node this instance was bound to, on the instance itself, where its
        metadata service shows it to that instance alone: the tag `slurm-node` (AWS, read
        through instance metadata tags) or the instance attribute `slurm-node` (GCE). The
        join program on the VM waits for it (`infra/bootstrap/gpu-burst-join.py`)."""
        ...

    def terminate(self, instance: OwnedInstance, token: str) -> None:
        """Terminate this instance and decrement its group's size so it is not replaced.
        An instance that is already gone is not an error."""
        ...


@runtime_checkable
class ConsoleReader(Protocol):
    def console_output(self, instance: OwnedInstance) -> str:
        """The instance's serial console, newest last, as the cloud keeps it ("" when it
        keeps none yet). Raises CloudError like every other call."""
        ...


@dataclass(frozen=True, slots=True)
class CloudPorts:
    """One cloud's two ports, as the controller holds them."""

    driver: PoolDriver
    capacity: CloudCapacity
    field: FieldPreflight | None = None  # doctor's checks of placement, image, role, network
    console: ConsoleReader | None = None  # a VM's serial console, read when it fails to join
