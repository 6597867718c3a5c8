"""Slurm hostlist expressions: `cloud-aws-[1-3,5]`, `n[01-02]-gpu[1-2]`, `a,b[7-8]`.

Slurm hands ResumeProgram/SuspendProgram a hostlist and prints node lists in this form
(`nodes` in squeue, `scontrol show hostnames` does the same expansion). Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from provisioner.domain.errors import InvalidArgument

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
MAX_HOSTS = 100_000


class HostlistError(InvalidArgument):
    """The hostlist expression cannot be read."""


def _split_top(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested '[' in hostlist {expr!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in hostlist {expr!r}")
        elif ch == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    if depth != 0:
        raise HostlistError(f"unbalanced '[' in hostlist {expr!r}")
    parts.append(expr[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_ranges(body: str, expr: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        m = _RANGE.match(item.strip())
        if not m:
            raise HostlistError(f"bad range {item!r} in hostlist {expr!r}")
        lo_s, hi_s = m.group(1), m.group(2)
        if hi_s is None:
            out.append(lo_s)
            continue
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise HostlistError(f"range {item!r} runs backwards in hostlist {expr!r}")
        if hi - lo >= MAX_HOSTS:
            raise HostlistError(f"range {item!r} is too large in hostlist {expr!r}")
        width = len(lo_s) if lo_s.startswith("0") and len(lo_s) > 1 else 0
        out.extend(str(i).zfill(width) for i in range(lo, hi + 1))
    return out


def _expand_one(word: str, expr: str) -> list[str]:
    results = [""]
    pos = 0
    while pos < len(word):
        lb = word.find("[", pos)
        if lb < 0:
            results = [r + word[pos:] for r in results]
            break
        rb = word.find("]", lb)
        if rb < 0:
            raise HostlistError(f"unbalanced '[' in hostlist {expr!r}")
        prefix = word[pos:lb]
        values = _expand_ranges(word[lb + 1 : rb], expr)
        results = [r + prefix + v for r in results for v in values]
        if len(results) > MAX_HOSTS:
            raise HostlistError(f"hostlist {expr!r} expands to too many hosts")
        pos = rb + 1
    return results


def expand_hostlist(expr: str) -> tuple[str, ...]:
    """Expand a hostlist into node names, in order, without duplicates. `""`/`"(null)"` → ()."""
    expr = expr.strip()
    if not expr or expr in ("(null)", "None", "N/A"):
        return ()
    seen: dict[str, None] = {}
    for word in _split_top(expr):
        if any(c.isspace() for c in word):
            raise HostlistError(f"whitespace in hostlist {expr!r}")
        for host in _expand_one(word, expr):
            seen.setdefault(host, None)
    return tuple(seen)


def join_hostlist(names: Iterable[str]) -> str:
    """A hostlist Slurm accepts: the names joined with commas (no compression needed)."""
    return ",".join(names)
