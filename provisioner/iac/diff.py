"""Diff two renders: resources added, changed (property by property) and removed.

Resources are matched by (type, logical name), as Pulumi matches them within a stack. The logical
name of a node group's resources carries its region, instance type and capacity, so an instance
type change is a removal plus an addition (which is what the engine would do), while a max size
change is an update of the group's `maxSize`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from provisioner.iac.render import Resource

Status = Literal["added", "changed", "removed"]
LONG_VALUE = 120


@dataclass(frozen=True)
class PropertyChange:
    path: str  # "maxSize", "tags.pool", "blockDeviceMappings[0].ebs.volumeSize"
    old: Any = None
    new: Any = None
    # False when the path is absent on that side (added or removed property)
    had_old: bool = True
    had_new: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "old": display_value(self.old) if self.had_old else None,
            "new": display_value(self.new) if self.had_new else None,
        }


@dataclass(frozen=True)
class ResourceChange:
    status: Status
    type: str
    name: str
    pool: str
    group: str
    properties: tuple[PropertyChange, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        from provisioner.iac.render import short_type

        out: dict[str, Any] = {
            "status": self.status,
            "type": self.type,
            "display_type": short_type(self.type),
            "name": self.name,
            "pool": self.pool,
            "group": self.group,
        }
        if self.status == "changed":
            out["properties"] = [p.to_dict() for p in self.properties]
        return out


@dataclass
class ResourceDiff:
    added: list[ResourceChange] = field(default_factory=list)
    changed: list[ResourceChange] = field(default_factory=list)
    removed: list[ResourceChange] = field(default_factory=list)
    unchanged: int = 0

    @property
    def all(self) -> list[ResourceChange]:
        return [*self.added, *self.changed, *self.removed]

    def for_pool(self, pool: str) -> list[ResourceChange]:
        return [c for c in self.all if c.pool == pool]


def display_value(value: Any) -> Any:
    """Long strings (user data) as their size and digest; everything else as is."""
    if isinstance(value, str) and len(value) > LONG_VALUE:
        digest = hashlib.sha256(value.encode()).hexdigest()[:12]
        return f"<{len(value)} chars, sha256 {digest}>"
    return value


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested inputs as {path: leaf}. Empty containers are leaves."""
    out: dict[str, Any] = {}
    if isinstance(value, Mapping) and value:
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(value, list | tuple) and value:
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}[{i}]"))
    else:
        out[prefix] = value
    return out


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def property_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[PropertyChange]:
    a, b = flatten(dict(old)), flatten(dict(new))
    out: list[PropertyChange] = []
    for path in sorted(set(a) | set(b)):
        if path in a and path in b:
            if _canon(a[path]) != _canon(b[path]):
                out.append(PropertyChange(path, a[path], b[path]))
        elif path in a:
            out.append(PropertyChange(path, a[path], None, had_new=False))
        else:
            out.append(PropertyChange(path, None, b[path], had_old=False))
    return out


def diff_resources(base: Iterable[Resource], head: Iterable[Resource]) -> ResourceDiff:
    old = {r.key: r for r in base}
    new = {r.key: r for r in head}
    out = ResourceDiff()
    for key in sorted(set(old) | set(new), key=lambda k: (k[1], k[0])):
        if key not in old:
            r = new[key]
            out.added.append(ResourceChange("added", r.type, r.name, r.pool, r.group))
        elif key not in new:
            r = old[key]
            out.removed.append(ResourceChange("removed", r.type, r.name, r.pool, r.group))
        else:
            props = property_changes(old[key].inputs, new[key].inputs)
            if props:
                r = new[key]
                out.changed.append(
                    ResourceChange("changed", r.type, r.name, r.pool, r.group, tuple(props))
                )
            else:
                out.unchanged += 1
    return out


def model_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[PropertyChange]:
    """Top-level field changes of two policy models (lists compared whole, as written)."""
    out: list[PropertyChange] = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if _canon(a) != _canon(b):
            out.append(PropertyChange(key, a, b, had_old=key in old, had_new=key in new))
    return out


def summarize(changes: Sequence[ResourceChange]) -> dict[str, int]:
    return {s: sum(1 for c in changes if c.status == s) for s in ("added", "changed", "removed")}
