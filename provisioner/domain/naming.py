"""Burst node names: `<pool>-<index>`, e.g. pool `cloud-aws` → `cloud-aws-1` … `cloud-aws-8`.

Pool names already match `^[a-z][a-z0-9-]{1,40}$`, so every name is a valid Slurm NodeName and
hostname, and a hostlist such as `cloud-aws-[1-3,5]` names nodes of one pool. Index starts at 1.
"""

from __future__ import annotations

import re

from provisioner.domain.errors import InvalidArgument

_NAME = re.compile(r"^([a-z][a-z0-9-]*?)-(\d+)$")


def burst_node_name(pool: str, index: int) -> str:
    if index < 1:
        raise InvalidArgument(f"burst node index must be >= 1, got {index}")
    if not re.fullmatch(r"[a-z][a-z0-9-]{1,40}", pool) or pool.endswith("-"):
        raise InvalidArgument(f"pool name {pool!r} cannot name Slurm nodes")
    return f"{pool}-{index}"


def burst_node_names(pool: str, count: int) -> tuple[str, ...]:
    return tuple(burst_node_name(pool, i) for i in range(1, count + 1))


def parse_burst_node_name(name: str) -> tuple[str, int] | None:
    """(pool, index) of a burst node name, or None when the name is not of that form."""
    m = _NAME.match(name)
    if not m:
        return None
    return m.group(1), int(m.group(2))


def pool_of(name: str) -> str:
    parsed = parse_burst_node_name(name)
    return parsed[0] if parsed else ""


def hostlist_expr(pool: str, count: int) -> str:
    """The compact hostlist for a pool's nodes: `cloud-aws-[1-4]` (`cloud-aws-1` for one)."""
    return f"{pool}-1" if count == 1 else f"{pool}-[1-{count}]"
