"""On-prem GPU availability as a slot model, used to predict when a pending job would start.

Every on-prem GPU is a slot holding the time it next becomes free. A job of g <= G GPUs (G per
node) starts on the node whose g-th earliest slot frees first (gang placement on one node); a
larger job takes whole nodes plus one node for the remainder. Placing a job moves its slots to
its predicted end. This is FIFO list scheduling that lets a later job start earlier on another
node, but never slides into a hole before an earlier reservation, so predictions are
conservative: a job never starts later than predicted when runtimes are exact.

Per-size heaps with lazy invalidation keep one placement O(log N) for 10,000 nodes.
"""

from __future__ import annotations

import heapq
import math
from bisect import insort
from dataclasses import dataclass

INF = math.inf


@dataclass(frozen=True, slots=True)
class Placement:
    start_ts: float
    nodes: tuple[int, ...]
    gpus_each: tuple[int, ...]


class OnPremProfile:
    __slots__ = ("_heaps", "_version", "free_at", "gpus_per_node", "node_names")

    def __init__(
        self,
        free_at: list[list[float]],
        gpus_per_node: int,
        node_names: tuple[str, ...] | None = None,
    ) -> None:
        self.gpus_per_node = gpus_per_node
        self.free_at = free_at
        self.node_names = node_names or tuple(f"onprem-{i}" for i in range(len(free_at)))
        self._version = [0] * len(free_at)
        self._heaps: dict[int, list[tuple[float, int, int]]] = {}

    @classmethod
    def idle(cls, nodes: int, gpus_per_node: int, now_ts: float) -> OnPremProfile:
        return cls([[now_ts] * gpus_per_node for _ in range(nodes)], gpus_per_node)

    @property
    def nodes(self) -> int:
        return len(self.free_at)

    @property
    def total_gpus(self) -> int:
        return sum(1 for row in self.free_at for v in row if v != INF)

    def copy(self) -> OnPremProfile:
        twin = OnPremProfile([list(r) for r in self.free_at], self.gpus_per_node, self.node_names)
        twin._version = list(self._version)
        twin._heaps = {g: list(h) for g, h in self._heaps.items()}
        return twin

    def _heap(self, g: int) -> list[tuple[float, int, int]]:
        h = self._heaps.get(g)
        if h is None or len(h) > 4 * len(self.free_at) + 64:
            h = [(row[g - 1], i, self._version[i]) for i, row in enumerate(self.free_at)]
            heapq.heapify(h)
            self._heaps[g] = h
        return h

    def _best(self, g: int) -> tuple[float, int]:
        h = self._heap(g)
        while h:
            key, idx, ver = h[0]
            if ver == self._version[idx]:
                return key, idx
            heapq.heappop(h)
        return INF, -1

    def free_now(self, now_ts: float) -> int:
        return sum(1 for row in self.free_at for v in row if v <= now_ts)

    def earliest(self, gpus: int, not_before: float) -> Placement | None:
        """Earliest start for a job of `gpus` GPUs, or None if it can never fit."""
        G = self.gpus_per_node
        if gpus <= 0:
            return Placement(not_before, (), ())
        if gpus <= G:
            key, idx = self._best(gpus)
            if idx < 0 or key == INF:
                return None
            return Placement(max(key, not_before), (idx,), (gpus,))
        full, rest = divmod(gpus, G)
        need = full + (1 if rest else 0)
        if need > len(self.free_at):
            return None
        # Multi-node jobs are rare: a sort over nodes is fine here.
        order = sorted(range(len(self.free_at)), key=lambda i: (self.free_at[i][G - 1], i))
        chosen = order[:full]
        start = max((self.free_at[i][G - 1] for i in chosen), default=not_before)
        each = [G] * full
        if rest:
            taken = set(chosen)
            cand = min(
                (i for i in range(len(self.free_at)) if i not in taken),
                key=lambda i: (self.free_at[i][rest - 1], i),
                default=-1,
            )
            if cand < 0:
                return None
            start = max(start, self.free_at[cand][rest - 1])
            chosen.append(cand)
            each.append(rest)
        if start == INF:
            return None
        return Placement(max(start, not_before), tuple(chosen), tuple(each))

    def commit(self, placement: Placement, end_ts: float) -> None:
        """Occupy the placement's slots until end_ts (mutates this profile: callers copy first)."""
        for idx, g in zip(placement.nodes, placement.gpus_each, strict=True):
            row = self.free_at[idx]
            keep = row[g:]
            for _ in range(g):
                insort(keep, end_ts)
            self.free_at[idx] = keep
            self._version[idx] += 1
            v = self._version[idx]
            for size, h in self._heaps.items():
                heapq.heappush(h, (keep[size - 1], idx, v))

    def release(self, placement: Placement, end_ts: float, now_ts: float) -> None:
        """A job ended (or left) before end_ts: give back the slots that still hold end_ts."""
        for idx, g in zip(placement.nodes, placement.gpus_each, strict=True):
            row = self.free_at[idx]
            changed = 0
            for j in range(len(row) - 1, -1, -1):
                if changed == g:
                    break
                if row[j] == end_ts:
                    row[j] = now_ts
                    changed += 1
            if changed:
                row.sort()
                self._version[idx] += 1
                v = self._version[idx]
                for size, h in self._heaps.items():
                    heapq.heappush(h, (row[size - 1], idx, v))
