"""The review itself: render base and head, diff, price, check, and one value with all of it.

`build_review(head, base, ...)` is what the CLI and the API call; `review_for_pool_creation` is the
controller's entry (the review of the one pool it is about to create, stored with the decision).
The result is a plain `Review`; `to_dict()` is its JSON form and `provisioner.iac.report` renders
the Markdown from that same dict, so both formats say the same thing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from provisioner.act.pulumi_driver import load_pool_program
from provisioner.config.models import Policy, PoolPolicy
from provisioner.domain.errors import ConfigError, InputError
from provisioner.domain.money import to_cents
from provisioner.domain.offers import Offer
from provisioner.iac.diff import (
    PropertyChange,
    ResourceChange,
    ResourceDiff,
    diff_resources,
    model_changes,
    summarize,
)
from provisioner.iac.guard import Guard, PolicyInfo, Violation, load_pack, load_policy_config
from provisioner.iac.preview import Rendering, detect, run_previews
from provisioner.iac.pricing import DEFAULT_EXPECTED_USE, PoolCost, price_pool
from provisioner.iac.render import PoolProgram, PoolSpecs, Resource, render_specs, specs_for_policy
from provisioner.iac.sources import (
    PROGRAM,
    TEMPLATE,
    PolicySource,
    empty_policy,
    git_root,
    load_dir,
    load_git,
    package_program_file,
)
from provisioner.shown_paths import display_path

if TYPE_CHECKING:
    from provisioner.ports.store import DecisionLog

PoolStatus = Literal["added", "removed", "changed", "unchanged"]
SCHEMA = "gpu-burst/iac-review/v1"


@dataclass
class PoolReview:
    name: str
    cloud: str
    status: PoolStatus
    policy_changes: list[PropertyChange] = field(default_factory=list)
    resources: list[ResourceChange] = field(default_factory=list)
    groups_base: int = 0
    groups_head: int = 0
    cost_base: PoolCost | None = None
    cost_head: PoolCost | None = None
    violations: list[Violation] = field(default_factory=list)
    placement: dict[str, Any] = field(default_factory=dict)  # where the head puts its VMs
    verdicts: dict[str, str] = field(default_factory=dict)  # policy -> its verdict on the pool

    @property
    def expected_usd_month_delta(self) -> Decimal:
        return _amount(self.cost_head, "expected_usd_month") - _amount(
            self.cost_base, "expected_usd_month"
        )

    @property
    def max_usd_hr_delta(self) -> Decimal:
        return _amount(self.cost_head, "max_usd_hr") - _amount(self.cost_base, "max_usd_hr")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cloud": self.cloud,
            "status": self.status,
            "policy_changes": [c.to_dict() for c in self.policy_changes],
            "resource_counts": summarize(self.resources),
            "resources": [c.to_dict() for c in self.resources],
            "node_groups": {"base": self.groups_base, "head": self.groups_head},
            "cost": {
                "base": self.cost_base.to_dict() if self.cost_base else None,
                "head": self.cost_head.to_dict() if self.cost_head else None,
                "expected_usd_month_delta": str(self.expected_usd_month_delta),
                "max_usd_hr_delta": str(self.max_usd_hr_delta),
            },
            "violations": [v.to_dict() for v in self.violations],
            "placement": self.placement,
            "policy_verdicts": [{"policy": k, "verdict": v} for k, v in self.verdicts.items()],
        }


def _amount(cost: PoolCost | None, attr: str) -> Decimal:
    if cost is None:
        return Decimal(0)
    value = getattr(cost, attr)
    return value if isinstance(value, Decimal) else Decimal(0)


@dataclass
class Review:
    head_label: str
    base_label: str
    pools: list[PoolReview]
    diff: ResourceDiff
    violations: list[Violation]
    new_violations: set[tuple[str, str, str, str]]
    rendering: Rendering
    policies: list[PolicyInfo]
    expected_use: Decimal
    resources_base: int = 0
    resources_head: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def mandatory(self) -> list[Violation]:
        return [v for v in self.violations if v.mandatory]

    @property
    def verdict(self) -> str:
        return "fail" if self.mandatory else "pass"

    @property
    def exit_code(self) -> int:
        return 1 if self.mandatory else 0

    def total(self, side: str, attr: str) -> Decimal:
        return sum(
            (_amount(p.cost_head if side == "head" else p.cost_base, attr) for p in self.pools),
            Decimal(0),
        )

    def to_dict(self) -> dict[str, Any]:
        counts = {s: sum(1 for p in self.pools if p.status == s) for s in _POOL_ORDER}
        base_month = self.total("base", "expected_usd_month")
        head_month = self.total("head", "expected_usd_month")
        base_hr = self.total("base", "max_usd_hr")
        head_hr = self.total("head", "max_usd_hr")
        return {
            "schema": SCHEMA,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "base": self.base_label,
            "head": self.head_label,
            "summary": {
                "pools": counts,
                "resources": {
                    "added": len(self.diff.added),
                    "changed": len(self.diff.changed),
                    "removed": len(self.diff.removed),
                    "unchanged": self.diff.unchanged,
                    "base": self.resources_base,
                    "head": self.resources_head,
                },
                "violations": {
                    "mandatory": len(self.mandatory),
                    "advisory": len(self.violations) - len(self.mandatory),
                    "new": len(self.new_violations),
                },
                "cost": {
                    "expected_use_default": str(self.expected_use),
                    "expected_usd_month": {
                        "base": str(to_cents(base_month)),
                        "head": str(to_cents(head_month)),
                        "delta": str(to_cents(head_month - base_month)),
                    },
                    "max_usd_hr": {
                        "base": str(base_hr),
                        "head": str(head_hr),
                        "delta": str(head_hr - base_hr),
                    },
                },
            },
            "pools": [p.to_dict() for p in self.pools],
            "violations": [
                {**v.to_dict(), "new": v.key in self.new_violations} for v in self.violations
            ],
            "policies": [p.to_dict() for p in self.policies],
            "rendering": self.rendering.to_dict(),
            "notes": list(self.notes),
        }


_POOL_ORDER: tuple[PoolStatus, ...] = ("added", "changed", "removed", "unchanged")


_PROGRAMS: OrderedDict[str, PoolProgram] = OrderedDict()  # by the digest of their source
_PROGRAMS_MAX = 8


def _load_program(infra_dir: Path | None) -> tuple[PoolProgram, str]:
    """`build_pool` of a base's `infra_dir` (None: this package's own), and its source's digest."""
    path = infra_dir / PROGRAM if infra_dir is not None else package_program_file()
    key = hashlib.sha256(path.read_bytes()).hexdigest()
    with _PROGRAMS_LOCK:
        program = _PROGRAMS.get(key)
    if program is None:
        program = _program_from_file(path) if infra_dir is not None else load_pool_program()
        with _PROGRAMS_LOCK:
            _PROGRAMS[key] = program
            while len(_PROGRAMS) > _PROGRAMS_MAX:
                _PROGRAMS.popitem(last=False)
    return program, key


def _program_from_file(path: Path) -> PoolProgram:
    """A base commit's own program, loaded from the file `load_git` wrote: that commit's code
    is data under review, not a module of this package."""
    spec = importlib.util.spec_from_file_location(f"iac_base_program_{path.parent.name}", path)
    if spec is None or spec.loader is None:
        raise InputError(f"{path}: not a loadable Python file (the pool program)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    build: PoolProgram = module.build_pool
    return build


_PROGRAMS_LOCK = threading.Lock()


@dataclass
class _Side:
    source: PolicySource
    specs: PoolSpecs
    resources: list[Resource]
    program: PoolProgram
    program_key: str


def _render_side(
    source: PolicySource,
    catalog: Sequence[Offer],
    *,
    decision_id: str,
    fallback: tuple[PoolProgram, str] | None,
    notes: list[str],
) -> _Side:
    loaded: tuple[PoolProgram, str] | None = None
    template = None
    if source.infra_dir is not None:
        try:
            loaded = _load_program(source.infra_dir)
            template = source.infra_dir / TEMPLATE
        except Exception as exc:  # an old program that no longer imports against this package
            notes.append(
                f"{source.label}: its pool program could not be loaded "
                f"({type(exc).__name__}); rendered with the working tree's program"
            )
    if loaded is None:
        loaded = fallback or _load_program(None)
    specs = specs_for_policy(
        source.policy, catalog, decision_id=decision_id, template_path=template
    )
    try:
        resources = render_specs(specs.specs, loaded[0], cache_key=loaded[1])
    except Exception as exc:
        if fallback is None or loaded[1] == fallback[1]:
            raise
        notes.append(
            f"{source.label}: its pool program failed ({type(exc).__name__}); "
            "rendered with the working tree's program"
        )
        loaded = fallback
        specs = specs_for_policy(source.policy, catalog, decision_id=decision_id)
        resources = render_specs(specs.specs, loaded[0], cache_key=loaded[1])
    notes.extend(f"{source.label}: {n}" for n in specs.notes)
    return _Side(source, specs, resources, loaded[0], loaded[1])


PLACEMENT_FIELDS = (
    "zones",
    "subnets",
    "security_groups",
    "network",
    "subnetwork",
    "network_tags",
    "root_disk_gb",
    "instance_profile",
    "service_account",
)


def placement_of(pool: PoolPolicy) -> dict[str, Any]:
    """Where a pool's VMs go and what they run as, the fields it sets (the rest: the cloud's
    defaults); the root disk always."""
    got = pool.model_dump(mode="json", include=set(PLACEMENT_FIELDS))
    return {k: got[k] for k in PLACEMENT_FIELDS if got[k] or k == "root_disk_gb"}


def pool_verdicts(
    policies: Iterable[PolicyInfo], types: set[str], violations: Iterable[Violation]
) -> dict[str, str]:
    """Each rule's verdict on one pool: "fail" (a mandatory violation), "advisory", "pass", or
    "not applicable" when the pool has none of the resource types the rule reads (an AWS-only
    rule on a GCP pool; every rule on a removed pool)."""
    hit: dict[str, str] = {}
    for v in violations:
        if hit.get(v.policy) != "fail":
            hit[v.policy] = "fail" if v.mandatory else "advisory"
    return {
        p.name: hit.get(p.name) or ("pass" if types and p.applies_to(types) else "not applicable")
        for p in policies
    }


def _pool_review(
    name: str,
    base: PoolPolicy | None,
    head: PoolPolicy | None,
    diff: ResourceDiff,
    base_side: _Side,
    head_side: _Side,
    catalog: Sequence[Offer],
    expected_use: Decimal,
    violations: Iterable[Violation],
) -> PoolReview:
    resources = diff.for_pool(name)
    base_specs = [s for s in base_side.specs.specs if s.pool == name]
    head_specs = [s for s in head_side.specs.specs if s.pool == name]
    policy_changes: list[PropertyChange] = []
    status: PoolStatus
    if base is None:
        status = "added"
    elif head is None:
        status = "removed"
    else:
        policy_changes = model_changes(base.model_dump(mode="json"), head.model_dump(mode="json"))
        status = "changed" if policy_changes or resources else "unchanged"
    some = head or base
    assert some is not None
    return PoolReview(
        placement=placement_of(some),
        name=name,
        cloud=some.cloud,
        status=status,
        policy_changes=policy_changes,
        resources=resources,
        groups_base=len(base_specs),
        groups_head=len(head_specs),
        cost_base=price_pool(base, base_specs, catalog, expected_use=expected_use)
        if base
        else None,
        cost_head=price_pool(head, head_specs, catalog, expected_use=expected_use)
        if head
        else None,
        violations=[v for v in violations if v.pool == name],
    )


def build_review(
    head: PolicySource,
    base: PolicySource,
    *,
    catalog: Iterable[Offer],
    expected_use: Decimal = DEFAULT_EXPECTED_USE,
    guard: Guard | None = None,
    rendering: Rendering | None = None,
    decision_id: str = "iac",
) -> Review:
    """Render both sides, diff, price every pool, evaluate the pack on the head's resources."""
    offers = list(catalog)
    notes: list[str] = []
    guard = guard or Guard()
    rendering = rendering or detect(None)
    head_side = _render_side(head, offers, decision_id=decision_id, fallback=None, notes=notes)
    base_side = _render_side(
        base,
        offers,
        decision_id=decision_id,
        fallback=(head_side.program, head_side.program_key),
        notes=notes,
    )
    notes.extend(f"{head.label}: {n}" for n in head.notes)
    notes.extend(f"{base.label}: {n}" for n in base.notes)
    diff = diff_resources(base_side.resources, head_side.resources)
    violations = guard.evaluate(head_side.resources)
    before = {v.key for v in guard.evaluate(base_side.resources)}
    base_pools = {p.name: p for p in base.policy.pools}
    head_pools = {p.name: p for p in head.policy.pools}
    names = [p.name for p in head.policy.pools] + [
        p.name for p in base.policy.pools if p.name not in head_pools
    ]
    pools = [
        _pool_review(
            n,
            base_pools.get(n),
            head_pools.get(n),
            diff,
            base_side,
            head_side,
            offers,
            expected_use,
            violations,
        )
        for n in names
    ]
    pools.sort(key=lambda p: (_POOL_ORDER.index(p.status), p.name))
    for p in pools:
        types = {r.type for r in head_side.resources if r.pool == p.name}
        p.verdicts = pool_verdicts(guard.describe(), types, p.violations)
    run_previews(rendering, head_side.specs.specs, head_side.program)
    return Review(
        head_label=head.label,
        base_label=base.label,
        pools=pools,
        diff=diff,
        violations=violations,
        new_violations={v.key for v in violations} - before,
        rendering=rendering,
        policies=guard.describe(),
        expected_use=expected_use,
        resources_base=len(base_side.resources),
        resources_head=len(head_side.resources),
        notes=notes,
    )


def review_for_pool_creation(
    policy: Policy,
    pool_name: str,
    *,
    catalog: Iterable[Offer] | None = None,
    decision_id: str = "",
    expected_use: Decimal = DEFAULT_EXPECTED_USE,
    guard: Guard | None = None,
) -> dict[str, Any]:
    """The review of one pool the controller is about to create (against nothing), as JSON data.

    Store it with the decision: `store.set_iac_review(decision_id, review, "json")` (or
    `record_pool_creation_review`). The verdict is information for the record; the controller
    decides what a "fail" means (the same guardrails run again in `pulumi preview`).
    """
    from provisioner.plan.catalog import load_catalog

    pool = policy.pool(pool_name)  # KeyError: no such pool
    offers = list(catalog) if catalog is not None else list(load_catalog())
    head = PolicySource("controller", policy.model_copy(update={"pools": [pool]}))
    base = PolicySource("nothing", policy.model_copy(update={"pools": []}))
    review = build_review(
        head,
        base,
        catalog=offers,
        expected_use=expected_use,
        guard=guard,
        decision_id=decision_id or "iac",
    )
    out = review.to_dict()
    out["pool"] = pool_name
    out["decision_id"] = decision_id
    return out


def record_pool_creation_review(
    store: DecisionLog, decision_id: str, policy: Policy, pool_name: str, **kw: Any
) -> dict[str, Any]:
    """`review_for_pool_creation`, stored with the decision (the decision must be recorded)."""
    review = review_for_pool_creation(policy, pool_name, decision_id=decision_id, **kw)
    store.set_iac_review(decision_id, review, "json")
    return review


def _as_controller(source: PolicySource, controller: str) -> PolicySource:
    """The source's policy as `controller` runs it, unless the policy names its own."""
    policy = source.policy
    if "controller" in policy.model_fields_set or not policy.pools:
        return source
    source.policy = policy.model_copy(update={"controller": controller})
    return source


def review_working_tree(
    policies: Path,
    *,
    base_ref: str | None = None,
    base_dir: Path | None = None,
    catalog: Path | None = None,
    expected_use: Decimal = DEFAULT_EXPECTED_USE,
    policy_pack: Path | None = None,
    policy_config: Path | None = None,
    backend: str | None = None,
    controller: str = "",
) -> Review:
    """The CLI's and the API's review: `policies` (the head) against a git ref or a directory.

    `controller`: the installation's identity (kept in its store), for policies that name
    none: the groups and tags are reviewed as that controller makes them, not as `burst-ctl`.

    With neither, the base is `HEAD` when `policies` is in a git work tree (the review shows
    uncommitted changes), else nothing. Bad policy files raise `ConfigError` (file and field).
    """
    from provisioner.plan.catalog import load_catalog

    if base_ref is not None and base_dir is not None:
        raise InputError("give --base or --base-dir, not both")
    if not Path(policies).exists():
        raise ConfigError(str(policies), "", "no such file or directory")
    guard = Guard(
        load_pack(policy_pack),
        load_policy_config(policy_config),
        source=str(policy_config or ""),
    )
    offers = list(load_catalog(catalog))
    head = load_dir(Path(policies), label=f"working tree {display_path(Path(policies))}")
    base: PolicySource | None = None
    try:
        if base_dir is not None:
            base = load_dir(Path(base_dir))
        elif base_ref is not None:
            base = load_git(base_ref, Path(policies))
        elif Path(policies).is_dir() and git_root(Path(policies)) is not None:
            base = load_git("HEAD", Path(policies))
        else:
            base = PolicySource("nothing (not a git work tree)", empty_policy())
        if controller:
            head, base = _as_controller(head, controller), _as_controller(base, controller)
        return build_review(
            head,
            base,
            catalog=offers,
            expected_use=expected_use,
            guard=guard,
            rendering=detect(backend),
        )
    finally:
        if base is not None:
            base.close()
