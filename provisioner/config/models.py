"""Policy models. Every model forbids unknown keys so a typo is an error, not a silent default."""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from provisioner.domain.errors import InvalidArgument, UnknownName
from provisioner.domain.gpu_share import MIG_COMPUTE_SLICES, mig_profile_of
from provisioner.domain.offers import zone_in_region

# The team of jobs submitted without a Slurm account (map "" in team_of_account to override).
NO_ACCOUNT_TEAM = "no-account"


# The most a site could mean: larger money figures are typos or attacks ("1e999999" made
# /v1/budgets a 2 MB answer), refused with the file and the field.
MAX_USD_PER_HOUR = Decimal(1_000_000)
MAX_USD_PER_MONTH = Decimal(1_000_000_000)
MAX_USD_PER_GPU_HOUR = Decimal(10_000)
MAX_USD_PER_KWH = Decimal(100)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _far_above(
    value: float | None, ratio: float | None, guess_s: float | None, learned: bool
) -> bool:
    """Whether `value` is at least `ratio` times a learned guess (a rule left unset, a runtime
    not learned, or a figure missing: no)."""
    if ratio is None or not learned or guess_s is None or value is None:
        return False
    return value >= ratio * max(guess_s, 1.0)


class WaitPolicy(Strict):
    """How long a job may wait for on-prem GPUs before it bursts.

    With a runtime estimate (or time limit):
      cost-based, when `usd_per_wait_hour` is set: one hour of waiting for every
      `usd_per_wait_hour` dollars that running on-prem saves, i.e. the expected cost of the job's
      cheapest cloud offer over its runtime. Cheap spot capacity buys little patience.
      compute-based otherwise (Starburst's compute-wait): runtime_factor * gpus * runtime_s.
    Without one: per_gpu_s * gpus (the job's size carries most of the signal).
    Either is clamped to [floor_s, cap_s]. `urgent` classes (e.g. inference) burst at once, on
    on-demand capacity only. `default_runtime_s` is the runtime assumed for costs and start
    predictions when a job has neither an estimate nor a time limit.

    No regret: a job whose runtime is a guess (no estimate, or one learned from history) is not
    sent to the cloud at arrival on that guess. When its predicted start lies beyond its budget
    it first waits a share of the budget, `min(hedge_unknown, cv / hedge_cv)` (cv: the
    history's spread over its runtime; `hedge_unknown` with no estimate or fewer than two
    samples), and bursts then if on-prem has not started it. This is ski rental with a
    prediction (Purohit, Svitkina and Kumar, NeurIPS 2018): waiting a share s of the break-even
    time costs at most 1 + 1/s times the best choice in hindsight whatever the prediction, and
    1 + s when it is right; s = 0.5 bounds both (3x, 1.5x). s = 1 is the plain break-even rule
    (2x, ignoring the prediction); exact estimates decide at once. Estimates given as is and
    time limits are trusted (s = 0), unless `hedge_limits`.
    """

    usd_per_wait_hour: Decimal | None = Field(default=None, gt=0, le=MAX_USD_PER_HOUR)
    runtime_factor: float = Field(default=0.1, ge=0)
    per_gpu_s: float = Field(default=2772.0, ge=0)
    floor_s: float = Field(default=0.0, ge=0)
    cap_s: float = Field(default=604_800.0, gt=0)
    urgent: bool = False
    default_runtime_s: float | None = Field(default=None, gt=0)
    spot_allowed: bool = True
    hedge_cv: float = Field(default=1.0, gt=0)
    hedge_unknown: float = Field(default=0.5, ge=0, le=1)
    # The time limit as the worst case (off unless set): a job whose runtime is a guess learned
    # from history, and whose time limit is at least this many times that guess, gets the
    # waiting budget of a job running to its limit (still clamped to cap_s). A 50 s guess under
    # a 30-day limit then waits like a long job before it bursts, instead of bursting at once
    # and running for weeks in the cloud (docs/simulator.md, "The time limit as a worst case").
    limit_worst_case_ratio: float | None = Field(default=None, gt=1)
    # An unsure guess (off unless set): a runtime learned from history whose spread is at
    # least this many times the guess waits at least the no-estimate budget, per_gpu_s * GPUs.
    # A group whose last jobs disagree says little about its next one (docs/simulator.md).
    learned_floor_spread_ratio: float | None = Field(default=None, gt=0)
    # History trusted only to lengthen a wait (off unless set): every runtime learned from
    # history, however many samples agree, waits at least the no-estimate budget. A guess may
    # still make a job wait longer, never burst sooner than a job with no runtime would.
    learned_floor: bool = False
    # A time limit alone taken as a guess (off unless set): a job with no estimate but a limit
    # waits its hedge share (`hedge_unknown`) of the budget before it bursts, as a job with no
    # runtime does, instead of trusting the limit as its runtime. A limit is an upper bound the
    # user chose, often far above the runtime, so a start predicted from limits is late.
    hedge_limits: bool = False

    @model_validator(mode="after")
    def _floor_below_cap(self) -> WaitPolicy:
        if self.floor_s > self.cap_s:
            raise InvalidArgument(f"floor_s ({self.floor_s}) must not exceed cap_s ({self.cap_s})")
        return self

    def budget_s(
        self, gpus: int, runtime_s: float | None, cloud_cost_usd: float | None = None
    ) -> float:
        """Seconds the job may wait in all. `cloud_cost_usd` is the expected cost of its
        cheapest cloud offer (None when no offer fits: then only the compute rule applies)."""
        if self.urgent:
            return 0.0
        if runtime_s is None:
            raw = self.per_gpu_s * gpus
        elif self.usd_per_wait_hour is not None and cloud_cost_usd is not None:
            raw = 3600.0 * cloud_cost_usd / float(self.usd_per_wait_hour)
        else:
            raw = self.runtime_factor * gpus * runtime_s
        return min(self.cap_s, max(self.floor_s, raw))

    def limit_is_worst_case(
        self, expected_s: float | None, limit_s: float | None, learned: bool
    ) -> bool:
        """Whether the budget is taken at the time limit, not at a learned guess far below it."""
        return _far_above(limit_s, self.limit_worst_case_ratio, expected_s, learned)

    def learned_is_unsure(
        self, expected_s: float | None, spread_s: float | None, learned: bool
    ) -> bool:
        """Whether a learned guess spreads so widely that it gets the no-estimate budget."""
        return _far_above(spread_s, self.learned_floor_spread_ratio, expected_s, learned)

    def job_budget_s(
        self,
        gpus: int,
        expected_s: float | None,
        cheapest_usd: float | None,
        *,
        learned: bool = False,
        spread_s: float | None = None,
        limit_s: float | None = None,
        cost_at: Callable[[float], float | None] | None = None,
    ) -> float:
        """A job's whole waiting budget: `budget_s` for its runtime, raised to the budget at
        its time limit (`limit_worst_case_ratio`) or to the no-estimate budget
        (`learned_floor_spread_ratio`, `learned_floor`) when its runtime is a guess those rules
        distrust.
        `cost_at(seconds)`: the expected cost of its cheapest offer over that runtime. The
        planner and the simulator both ask this, so they agree on every budget."""
        budget = self.budget_s(gpus, expected_s, cheapest_usd)
        if limit_s is not None and self.limit_is_worst_case(expected_s, limit_s, learned):
            worst = cost_at(limit_s) if cost_at is not None else None
            budget = max(budget, self.budget_s(gpus, limit_s, worst))
        distrusted = learned and self.learned_floor
        if distrusted or self.learned_is_unsure(expected_s, spread_s, learned):
            budget = max(budget, self.budget_s(gpus, None))
        return budget


class WaitingPolicies(Strict):
    default: WaitPolicy = WaitPolicy()
    partitions: dict[str, WaitPolicy] = Field(default_factory=dict)
    qos: dict[str, WaitPolicy] = Field(default_factory=dict)

    def for_job(self, partition: str, qos: str) -> WaitPolicy:
        """QoS wins over partition, partition over the default."""
        if qos and qos in self.qos:
            return self.qos[qos]
        for p in partition.split(","):
            if p in self.partitions:
                return self.partitions[p]
        return self.default


class OnPrem(Strict):
    gpu_model: str = "A100"
    gpus_per_node: int = Field(default=8, ge=1)
    amortized_usd_per_gpu_hour: Decimal = Field(
        default=Decimal("1.20"), ge=0, le=MAX_USD_PER_GPU_HOUR
    )
    energy_usd_per_kwh: Decimal = Field(default=Decimal("0.12"), ge=0, le=MAX_USD_PER_KWH)
    equivalent_gpu_models: list[str] = Field(default_factory=list)
    # Partitions whose jobs run on on-prem nodes. Jobs there may burst: the controller adds the
    # pool's partition to a job it bursts (scontrol update), so users keep submitting as before.
    partitions: list[str] = Field(default_factory=lambda: ["onprem"])
    # Runtime assumed for cost and wait estimates when a job has no estimate and no time limit.
    fallback_runtime_s: float = Field(default=3600.0, gt=0)


class MigLayout(Strict):
    """Every GPU of a pool's nodes cut the same way: `per_gpu` MIG devices of one profile,
    named `profile` as the nodes' GRES type (Slurm matches a job's type exactly)."""

    profile: str = Field(min_length=3, max_length=64)
    per_gpu: int = Field(ge=1, le=7)

    @model_validator(mode="after")
    def _fits_a_gpu(self) -> MigLayout:
        p = mig_profile_of(self.profile)
        if p is None:
            raise InvalidArgument(
                f"mig.profile {self.profile!r}: names no MIG profile (e.g. 1g.10gb)"
            )
        if p.slices * self.per_gpu > MIG_COMPUTE_SLICES:
            raise InvalidArgument(
                f"mig: {self.per_gpu} x {p.name} need {p.slices * self.per_gpu} slices; "
                f"a GPU has {MIG_COMPUTE_SLICES}"
            )
        return self


class PoolPolicy(Strict):
    """A burst pool: where and on what the controller may create GPU nodes."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{1,40}$")
    cloud: Literal["aws", "gcp", "sim"]  # sim: the simulator's flat-priced cloud
    regions: list[str] = Field(min_length=1)
    gpu_model: str | None = None
    min_gpu_mem_gb: float | None = Field(default=None, gt=0)
    instance_types: list[str] = Field(default_factory=list)
    capacity: Literal["spot", "on-demand", "any"] = "any"
    max_nodes: int = Field(default=4, ge=0)
    boot_seconds: float = Field(default=300.0, ge=0)
    partition: str = "cloud"
    workload: Literal["batch", "interactive", "inference"] = "batch"
    team: str = ""
    # Boot image of the burst nodes (AMI id or GCE image); "" takes node.images from policy.
    image: str = ""
    # Expected busy fraction of max size, for the $/month estimate in IaC reviews.
    expected_utilization: Decimal | None = Field(default=None, ge=0, le=1)
    # Placement. `zones`: where the group may place VMs (AWS: its availability zones when no
    # subnets are named; GCP: its distribution zones; else the group's own choice). AWS: the
    # subnets the group launches into (else the region's default VPC) and the security groups
    # of its instances (else the VPC's default group). GCP: the VPC network and regional
    # subnetwork (else `default`) and the network tags firewall rules match.
    zones: list[str] = Field(default_factory=list)
    subnets: list[str] = Field(default_factory=list)
    security_groups: list[str] = Field(default_factory=list)
    network: str = ""
    subnetwork: str = ""
    network_tags: list[str] = Field(default_factory=list)
    root_disk_gb: int = Field(default=200, ge=10, le=65_536)  # the boot volume's size
    # The VM's own identity, which reads the pool's secrets (the munge key): an IAM instance
    # profile (AWS, name or ARN) or a service account e-mail (GCP). Nothing secret is in
    # user-data, which anyone who may describe the instance can read.
    instance_profile: str = ""
    service_account: str = ""
    # MIG-partitioned nodes: jobs asking for these devices burst here, packed several to a
    # node; whole-GPU jobs never do. None: whole GPUs.
    mig: MigLayout | None = None
    # Shared GPUs: jobs asking for shards (`--gres=shard:N`) burst here, `shards_per_gpu` of
    # them to each GPU (Slurm's shard GRES); whole-GPU jobs never do. None: whole GPUs.
    shards_per_gpu: int | None = Field(default=None, ge=1, le=128)

    @model_validator(mode="after")
    def _needs_gpu_selector(self) -> PoolPolicy:
        if not self.gpu_model and self.min_gpu_mem_gb is None and not self.instance_types:
            raise InvalidArgument("set gpu_model, min_gpu_mem_gb or instance_types")
        if self.mig is not None and self.shards_per_gpu is not None:
            raise InvalidArgument(
                f"pool {self.name}: mig and shards_per_gpu both set; a pool's GPUs are cut into "
                "MIG devices or shared as shards, not both"
            )
        if self.instance_profile and self.cloud != "aws":
            raise InvalidArgument(f"instance_profile is AWS's; pool {self.name} is {self.cloud}")
        if self.service_account and self.cloud != "gcp":
            raise InvalidArgument(f"service_account is GCP's; pool {self.name} is {self.cloud}")
        self._check_placement()
        return self

    def _check_placement(self) -> None:
        mine = {
            "aws": ("subnets", "security_groups"),
            "gcp": ("network", "subnetwork", "network_tags"),
        }
        for cloud, fields in mine.items():
            for f in fields:
                if getattr(self, f) and self.cloud != cloud:
                    raise InvalidArgument(
                        f"{f} is {cloud.upper()}'s; pool {self.name} is {self.cloud}"
                    )
        for z in self.zones:
            if not any(zone_in_region(z, r) for r in self.regions):
                raise InvalidArgument(
                    f"zone {z!r} of pool {self.name} is in none of its regions "
                    f"({', '.join(self.regions)})"
                )
        for t in self.network_tags:
            if not re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", t):
                raise InvalidArgument(
                    f"network tag {t!r} of pool {self.name}: GCE tags are 1-63 of [a-z0-9-], "
                    "starting with a letter"
                )


class TeamBudget(Strict):
    monthly_usd: Decimal = Field(ge=0, le=MAX_USD_PER_MONTH)


class Budgets(Strict):
    global_usd_per_hour: Decimal | None = Field(default=None, ge=0, le=MAX_USD_PER_HOUR)
    teams: dict[str, TeamBudget] = Field(default_factory=dict)
    team_of_account: dict[str, str] = Field(default_factory=dict)

    def team_for(self, account: str) -> str:
        """The team a Slurm account is billed to: mapped, else the account's own name. A job
        with no account still gets a team with a name, so its cost is never under ""."""
        if not account:
            return self.team_of_account.get("", NO_ACCOUNT_TEAM)
        return self.team_of_account.get(account, account)


class Guardrails(Strict):
    idle_timeout_s: float = Field(default=600.0, ge=0)
    nvml_idle_util_pct: float = Field(default=5.0, ge=0, le=100)
    require_nvml_idle: bool = True
    backoff_initial_s: float = Field(default=300.0, ge=0)
    backoff_max_s: float = Field(default=3600.0, ge=0)
    max_scale_up_nodes_per_pass: int = Field(default=64, ge=1)
    join_timeout_s: float = Field(default=600.0, gt=0)


class SpotRisk(Strict):
    """Spot risk comes from data (AWS advisor buckets); GCP publishes none: it takes a default."""

    default_interruption_pct: float = Field(default=10.0, ge=0, le=100)
    # The advisor's figure is a monthly interruption frequency; this turns it into a per-hour
    # hazard assuming instances live about this long on average.
    reference_hours: float = Field(default=720.0, gt=0)
    rework_fraction: float = Field(default=0.5, ge=0, le=1)


class Interruptions(Strict):
    """What a spot warning does to the node's running jobs (docs/clouds.md, "Spot warnings").

    On an interruption notice (AWS, 2 min) or a preemption (GCE, about 30 s) the node is
    drained and its running jobs get `signal` (Slurm `scancel --signal=<signal> --full`: the
    batch shell and every step); `checkpoint_s` later, and never later than `margin_s` before
    the VM goes, Slurm requeues them and the instance is ended."""

    signal: str = Field(default="USR1", pattern=r"^(|[A-Z][A-Z0-9+]{0,15})$")  # "": no signal
    checkpoint_s: float = Field(default=20.0, ge=0, le=110)
    margin_s: float = Field(default=5.0, ge=0, le=60)


class Health(Strict):
    """GPU health alert thresholds (NVML agent samples)."""

    temperature_warn_c: float = 85.0
    temperature_critical_c: float = 95.0
    ecc_dbe_volatile_max: int = Field(default=0, ge=0)
    xid_critical: list[int] = Field(default_factory=lambda: [48, 63, 64, 74, 79, 92, 94, 95])
    xid_ignore: list[int] = Field(default_factory=lambda: [13, 31, 43, 45])
    idle_mem_used_mib: float | None = Field(default=None, ge=0)
    # Whether GPUs that Slurm shows allocated but NVML shows idle count as busy in wait
    # predictions (they do: the scheduler will not hand them out), or as free (optimistic).
    allocated_idle_counts_busy: bool = True


class Telemetry(Strict):
    """Bounds on what NVML agents may push, and how long it is kept.

    Every bound is enforced at the API edge with a 422 naming the field, so forged or broken
    samples never reach the store, the energy ledger or the reconcile loop."""

    # A sample older than this (agent clock far behind, a replay) or further ahead than the
    # skew (agent clock ahead) is refused: it would bill energy into a closed period or block
    # every later genuine sample of the node.
    max_age_s: float = Field(default=3600.0, gt=0, le=7 * 86_400.0)
    max_future_skew_s: float = Field(default=300.0, ge=0, le=3600.0)
    max_gpus_per_node: int = Field(default=64, ge=1, le=1024)
    # A GPU drawing more than this is not believed (the largest boards draw about 1.2 kW).
    max_power_w: float = Field(default=5000.0, gt=0, le=100_000.0)
    # Energy is billed only across gaps between samples shorter than this; a longer gap (the
    # agent was away) is skipped, not guessed.
    max_energy_gap_s: float = Field(default=4 * 3600.0, gt=0, le=86_400.0)
    # Nodes that have not pushed for this long lose their stored samples.
    retention_s: float = Field(default=7 * 86_400.0, gt=0)
    # A job tag on a GPU must name a job Slurm shows on that node within this many seconds of
    # the sample: Slurm's view lags a job's start and end by up to a pass or two.
    job_tag_grace_s: float = Field(default=120.0, ge=0, le=3600.0)


class JobsHistory(Strict):
    """The jobs table (every job the controller saw): how long a closed job is kept. The
    replay of the site's own past reads the last week or so; the console reads further."""

    retention_days: int = Field(default=90, ge=1, le=3650)


# A Secret Manager secret: its id (1-255 of [A-Za-z0-9_-]), or its full resource name.
_SECRET_NAME = r"^(|[A-Za-z0-9_-]{1,255}|projects/[^/\s]+/secrets/[A-Za-z0-9_-]{1,255})$"


class NodeBootstrap(Strict):
    """How burst nodes find the controller and boot (rendered into cloud-init)."""

    controller_host: str = "slurmctld.internal"
    controller_port: int = Field(default=6817, ge=1, le=65535)  # slurmctld's SlurmctldPort
    # How a burst node's NodeAddr is set. `instance`: the controller sets it (scontrol update
    # nodeaddr=) to the instance's private address from the cloud's own answer, before the VM
    # learns its node name, and checks it on every pass: a node whose address is not its
    # instance's is drained, with an alert. `registration`: slurmctld takes it from whoever
    # registers (cloud_reg_addrs) and nothing is checked; only for the same-host stand-in
    # (register/same_host_stand_in.py), whose instances have no host of their own. docs/slurm.md.
    node_address: Literal["instance", "registration"] = "instance"
    join_deadline_s: int = Field(default=600, ge=10)  # how long a VM waits to be named
    # Run on the VM to print the cluster's munge key (e.g. from the cloud's secret store, with
    # the instance's own role); "" when the image already holds /etc/munge/munge.key.
    munge_key_command: str = ""
    # AWS pools: the SSM parameter (SecureString, the key base64) the VM reads its munge key
    # from with its instance profile's role; wins over munge_key_command. `ssm_endpoint`:
    # where the VM reaches SSM ("" = https://ssm.<region>.amazonaws.com).
    munge_key_parameter: str = ""
    ssm_endpoint: str = ""
    # GCP pools: the Secret Manager secret whose latest version holds the munge key (its raw
    # bytes), read with the pool's service account (`secretAccessor` on that secret only):
    # `projects/<p>/secrets/<s>`, or `<s>` in the pool's project. Wins over munge_key_command.
    # `secretmanager_endpoint`: where the VM reaches it ("" = Google's public endpoint).
    munge_key_secret: str = Field(default="", pattern=_SECRET_NAME)
    secretmanager_endpoint: str = ""
    images: dict[str, str] = Field(default_factory=dict)  # "aws" or "aws/us-east-1" -> image
    gcp_project: str = ""
    # The controller's API as burst nodes reach it (http://host:port). The node's spot watcher
    # reports its cloud's warnings there; "" runs no watcher.
    controller_api: str = Field(default="", pattern=r"^(|https?://[^\s/]+(/[^\s]*)?)$")
    # Where burst VMs install the GPU agent from: a folder of wheels pip may --find-links in
    # (the site's artifact store, a bucket), holding this project's wheel and the agent's
    # dependencies for the image's Python (`make agent-wheels` builds one). "" installs no
    # agent. The agent pushes to `controller_api` with the token the node asks for there.
    agent_wheels: str = Field(default="", pattern=r"^(|https?://\S+|file:///\S+)$")
    agent_interval_s: float = Field(default=15.0, ge=1, le=3600)  # between its samples


class Selection(Strict):
    """Choosing the waiting policy from the site's own past (plan/selection.py): every
    `interval_s` the portfolio is replayed over the last `window_s`, and the cheapest candidate
    whose average JCT is within `jct_bound` times `immediate`'s is adopted, once it has been the
    choice on `confirm_rounds` rounds in a row, each time saving more than `margin` of the
    larger of the policy in force's dollars and immediate's (or the policy in force broke the
    bound)."""

    interval_s: float = Field(default=86_400.0, gt=0)
    window_s: float = Field(default=604_800.0, gt=0)
    jct_bound: float = Field(default=1.10, ge=1)
    margin: float = Field(default=0.05, ge=0, lt=1)
    confirm_rounds: int = Field(default=2, ge=1)


class Policy(Strict):
    controller: str = Field(default="burst-ctl", pattern=r"^[a-z][a-z0-9-]{1,40}$")
    onprem: OnPrem = OnPrem()
    waiting: WaitingPolicies = WaitingPolicies()
    pools: list[PoolPolicy] = Field(default_factory=list)
    budgets: Budgets = Budgets()
    guardrails: Guardrails = Guardrails()
    spot: SpotRisk = SpotRisk()
    interruptions: Interruptions = Interruptions()
    health: Health = Health()
    telemetry: Telemetry = Telemetry()
    jobs: JobsHistory = JobsHistory()
    node: NodeBootstrap = NodeBootstrap()
    selection: Selection = Selection()

    @field_validator("pools")
    @classmethod
    def _unique_pool_names(cls, pools: list[PoolPolicy]) -> list[PoolPolicy]:
        seen: set[str] = set()
        for p in pools:
            if p.name in seen:
                raise InvalidArgument(f"pool name {p.name!r} is declared twice")
            seen.add(p.name)
        return pools

    @model_validator(mode="after")
    def _agent_reaches_the_controller(self) -> Policy:
        if self.node.agent_wheels and not self.node.controller_api:
            raise InvalidArgument(
                "node.controller_api: burst VMs install the GPU agent (node.agent_wheels), "
                "which pushes there and gets its token there; set where they reach the API"
            )
        return self

    @model_validator(mode="after")
    def _secret_readers(self) -> Policy:
        """A VM reads its munge key from the secret store with its own identity: a pool with
        none would boot, fail to read it and never join (money spent till the join timeout)."""
        for p in self.pools:
            if p.cloud == "aws" and self.node.munge_key_parameter and not p.instance_profile:
                raise InvalidArgument(
                    f"pools[{p.name}].instance_profile: the VM reads its munge key from SSM "
                    f"(node.munge_key_parameter) with its instance profile, and this pool "
                    "has none"
                )
            if p.cloud == "gcp" and self.node.munge_key_secret and not p.service_account:
                raise InvalidArgument(
                    f"pools[{p.name}].service_account: the VM reads its munge key from Secret "
                    "Manager (node.munge_key_secret) as its service account, and this pool "
                    "runs as none"
                )
        return self

    def pool(self, name: str) -> PoolPolicy:
        for p in self.pools:
            if p.name == name:
                return p
        raise UnknownName(f"no pool named {name!r}")
