"""The CrossGuard pack, evaluated in-process on rendered resources.

`policies/policypack/__main__.py` constructs `PolicyPack`, which starts the analyzer's gRPC server
and blocks, so it is never imported. The policies come from `gpu_policies.POLICIES` and run through
pulumi_policy's own analyzer servicer (`_PolicyAnalyzerServicer.Analyze`), the code the Pulumi CLI
calls over gRPC: property deserialisation, enforcement levels and the policy config behave as in a
`pulumi preview --policy-pack`.

Policy config: the JSON file `pulumi preview --policy-pack-config` takes, i.e.
`{"policy-name": "mandatory" | "advisory" | "disabled"}` or
`{"policy-name": {"enforcementLevel": "...", "<property>": value}}`.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner import data_files
from provisioner.domain.errors import ConfigError
from provisioner.iac.render import Resource, short_type

PACK_NAME = "gpu-burst-guardrails"
PACK_VERSION = "0.1.0"
LEVELS = ("advisory", "mandatory", "remediate", "disabled")


def default_policy_pack() -> Path:
    return data_files.policypack_dir()


@dataclass(frozen=True)
class Violation:
    policy: str
    level: str  # "mandatory" | "advisory" | ...
    resource_type: str
    resource: str
    pool: str
    message: str

    @property
    def mandatory(self) -> bool:
        return self.level == "mandatory"

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.policy, self.resource_type, self.resource, self.message)

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "level": self.level,
            "resource_type": self.resource_type,
            "display_type": short_type(self.resource_type),
            "resource": self.resource,
            "pool": self.pool,
            "message": self.message,
        }


@dataclass(frozen=True)
class PolicyInfo:
    name: str
    description: str
    level: str
    # The resource types the rule reads; () when the pack does not say (it may read any).
    resource_types: tuple[str, ...] = ()

    def applies_to(self, types: Iterable[str]) -> bool:
        """Whether the rule reads any of these resource types (a pool's)."""
        return not self.resource_types or bool(set(self.resource_types) & set(types))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "level": self.level,
            "resource_types": [short_type(t) for t in self.resource_types],
        }


@dataclass(frozen=True)
class Pack:
    """The pack's rules, and the resource types each reads (`RESOURCE_TYPES`, optional)."""

    policies: list[Any]
    resource_types: dict[str, tuple[str, ...]]


def load_policies(pack_dir: Path | None = None) -> list[Any]:
    """`POLICIES` from the pack's `gpu_policies.py` (never its `__main__`)."""
    return load_pack(pack_dir).policies


def load_pack(pack_dir: Path | None = None) -> Pack:
    """The pack's `gpu_policies.py` (never its `__main__`): `POLICIES` and `RESOURCE_TYPES`."""
    path = (pack_dir or default_policy_pack()) / "gpu_policies.py"
    if not path.is_file():
        raise ConfigError(str(path), "", "policy pack module not found")
    spec = importlib.util.spec_from_file_location("gpu_burst_iac_policies", path)
    if spec is None or spec.loader is None:
        raise ConfigError(str(path), "", "cannot load the policy pack module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    types = getattr(module, "RESOURCE_TYPES", {})
    return Pack(list(module.POLICIES), {str(k): tuple(v) for k, v in types.items()})


def load_policy_config(path: Path | None) -> dict[str, dict[str, Any]]:
    """Read and check a policy pack config file; {} when none."""
    if path is None:
        return {}
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read file ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(str(path), f"line {exc.lineno}", f"invalid JSON: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise ConfigError(str(path), "", "top level must be an object")
    out: dict[str, dict[str, Any]] = {}
    for name, value in raw.items():
        cfg = {"enforcementLevel": value} if isinstance(value, str) else value
        if not isinstance(cfg, dict):
            raise ConfigError(str(path), name, "must be an enforcement level or an object")
        level = cfg.get("enforcementLevel")
        if level is not None and str(level).lower() not in LEVELS:
            raise ConfigError(
                str(path), f"{name}.enforcementLevel", f"must be one of {', '.join(LEVELS)}"
            )
        out[str(name)] = dict(cfg)
    return out


class Guard:
    """The pack's policies behind the analyzer servicer, configured once."""

    def __init__(
        self,
        policies: Sequence[Any] | Pack | None = None,
        config: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        source: str = "",
    ) -> None:
        from pulumi_policy import EnforcementLevel
        from pulumi_policy.policy import _PolicyAnalyzerServicer

        pack = load_pack() if policies is None else policies
        if isinstance(pack, Pack):
            self.policies, self.resource_types = list(pack.policies), dict(pack.resource_types)
        else:
            self.policies, self.resource_types = list(pack), {}
        self.source = source
        by_name = {p.name: p for p in self.policies}
        unknown = sorted(set(config or {}) - set(by_name))
        if unknown:
            raise ConfigError(source or "policy config", unknown[0], "no such policy in the pack")
        self.levels = {p.name: _level_name(p.enforcement_level) for p in self.policies}
        self._svc = _PolicyAnalyzerServicer(
            PACK_NAME, PACK_VERSION, self.policies, EnforcementLevel.MANDATORY
        )
        if config:
            self._configure(config)

    def _configure(self, config: Mapping[str, Mapping[str, Any]]) -> None:
        from google.protobuf import struct_pb2
        from pulumi.runtime.proto import analyzer_pb2

        req = analyzer_pb2.ConfigureAnalyzerRequest()
        for name, cfg in config.items():
            props = dict(cfg)
            # An unset level reads as ADVISORY (the proto default): keep the policy's own.
            level = str(props.pop("enforcementLevel", "") or self.levels[name]).upper()
            self.levels[name] = level.lower()
            s = struct_pb2.Struct()
            s.update(props)
            req.policyConfig[name].properties.CopyFrom(s)
            req.policyConfig[name].enforcementLevel = analyzer_pb2.EnforcementLevel.Value(level)
        self._svc.Configure(req, None)  # type: ignore[no-untyped-call]

    def describe(self) -> list[PolicyInfo]:
        return [
            PolicyInfo(
                p.name, p.description, self.levels[p.name], self.resource_types.get(p.name, ())
            )
            for p in self.policies
        ]

    @staticmethod
    def _violation(d: Any, r: Resource, descriptions: Mapping[str, str]) -> Violation:
        from pulumi.runtime.proto import analyzer_pb2

        message = str(d.message)
        desc = descriptions.get(d.policyName, "")
        if desc and message.startswith(desc):
            message = message[len(desc) :].lstrip("\n ")
        return Violation(
            policy=str(d.policyName),
            level=analyzer_pb2.EnforcementLevel.Name(d.enforcementLevel).lower(),
            resource_type=r.type,
            resource=r.name,
            pool=r.pool,
            message=message,
        )

    def evaluate(self, resources: Iterable[Resource]) -> list[Violation]:
        from google.protobuf import struct_pb2
        from pulumi.runtime.proto import analyzer_pb2

        descriptions = {p.name: p.description for p in self.policies}
        out: list[Violation] = []
        by_urn: dict[str, Resource] = {}
        stack = analyzer_pb2.AnalyzeStackRequest()
        for r in resources:
            s = struct_pb2.Struct()
            s.update(dict(r.inputs))
            urn = f"urn:pulumi:iac-review::gpu-burst-pools::{r.type}::{r.name}"
            by_urn[urn] = r
            stack.resources.append(
                analyzer_pb2.AnalyzerResource(type=r.type, properties=s, urn=urn, name=r.name)
            )
            resp = self._svc.Analyze(  # type: ignore[no-untyped-call]
                analyzer_pb2.AnalyzeRequest(type=r.type, properties=s, urn=urn, name=r.name), None
            )
            out += [self._violation(d, r, descriptions) for d in resp.diagnostics]
        # Rules whose verdict is a pool's, not one resource's (a batch pool's spot groups).
        resp = self._svc.AnalyzeStack(stack, None)  # type: ignore[no-untyped-call]
        out += [self._violation(d, by_urn[d.urn], descriptions) for d in resp.diagnostics]
        return sorted(out, key=lambda v: (v.level != "mandatory", v.policy, v.pool, v.resource))


def _level_name(level: Any) -> str:
    return str(getattr(level, "value", level)).lower()
