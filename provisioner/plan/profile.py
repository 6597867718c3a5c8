"""On-prem GPU availability over time, for predicting when a pending job would start.

Each on-prem node keeps a step function of free GPUs: breakpoints `times[k]` and `free[k]`, the
free count from times[k] until times[k+1] (the last step lasts forever). A job is placed by
conservative backfilling: at the earliest time some node has its GPUs free for the job's whole
expected runtime (gang placement: a job of up to one node's GPUs runs on one node; larger jobs
take whole nodes plus one node for the remainder). Earlier reservations never move, so with exact
runtimes no job starts later than predicted.

Placement is first fit in node order for jobs that can start at once (what Slurm and the
published simulators do), and a lower-bound search over per-size heaps for later starts, so one
placement stays cheap on 10,000 nodes.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from dataclasses import dataclass

INF = math.inf
NEAR_ALL = 256  # multi-node jobs look at every node of a cluster up to this size


@dataclass(frozen=True, slots=True)
class Placement:
    start_ts: float
    nodes: tuple[int, ...]
    gpus_each: tuple[int, ...]


class OnPremProfile:
    __slots__ = (
        "_fails",
        "_fails_at",
        "_heaps",
        "_now",
        "_shared",
        "_soon",
        "_soon_from",
        "_version",
        "cap",
        "free",
        "gpus_per_node",
        "node_names",
        "times",
    )

    def __init__(
        self,
        capacities: list[int],
        now_ts: float,
        gpus_per_node: int | None = None,
        node_names: tuple[str, ...] | None = None,
    ) -> None:
        self.cap = list(capacities)
        self.gpus_per_node = gpus_per_node or max(self.cap or [0])
        self.times: list[list[float]] = [[now_ts] for _ in self.cap]
        self.free: list[list[int]] = [[c] for c in self.cap]
        self.node_names = node_names or tuple(f"onprem-{i}" for i in range(len(self.cap)))
        self._version = [0] * len(self.cap)
        self._heaps: dict[int, list[tuple[float, int, int]]] = {}
        # The single-node search's heaps: the same entries, but bounds from `_soon_from` on
        # (no start before it), raised to each query's time as the search meets them. Valid
        # for queries from `_soon_from` on; an earlier query rebuilds them. Kept apart from
        # _heaps, whose history-bound order picks the nodes a gang looks at in large clusters.
        self._soon: dict[int, list[tuple[float, int, int]]] = {}
        self._soon_from = -INF
        # (time, count of leading nodes full then)
        self._now: tuple[float, int] = (-INF, 0)
        # gpus -> {latest: shortest duration that found no start by `latest`} (for one
        # `not_before`, see _fails_at). Reservations only take GPUs away, so a longer job cannot
        # fit either: thousands of jobs that will burst skip the search. Cleared whenever GPUs
        # are given back. Nested rather than keyed by a tuple: a tuple per query was a container
        # allocated (and often kept) per job, which made the garbage collector run more often.
        self._fails: dict[int, dict[float, float]] = {}
        # The cache holds entries for one `not_before` only (the planner's `now`): older ones
        # can never be asked again, and copying them on every pass is what made copies slow.
        self._fails_at = -INF
        # Node i's step lists are shared with a copy (or the original) until either side changes
        # them: the planner copies the profile on every pass but touches only a few nodes.
        self._shared = [False] * len(self.cap)

    @classmethod
    def idle(cls, nodes: int, gpus_per_node: int, now_ts: float) -> OnPremProfile:
        return cls([gpus_per_node] * nodes, now_ts, gpus_per_node)

    @property
    def nodes(self) -> int:
        return len(self.cap)

    @property
    def total_gpus(self) -> int:
        return sum(self.cap)

    def copy(self) -> OnPremProfile:
        twin = OnPremProfile.__new__(OnPremProfile)
        twin.cap = self.cap
        twin.gpus_per_node = self.gpus_per_node
        twin.times = list(self.times)
        twin.free = list(self.free)
        shared = [True] * len(self.cap)
        self._shared = shared
        twin._shared = list(shared)
        twin.node_names = self.node_names
        twin._version = list(self._version)
        twin._heaps = {g: list(h) for g, h in self._heaps.items()}
        twin._soon = {g: list(h) for g, h in self._soon.items()}
        twin._soon_from = self._soon_from
        twin._now = self._now
        twin._fails = {g: dict(by_latest) for g, by_latest in self._fails.items()}
        twin._fails_at = self._fails_at
        return twin

    # ---- queries ---------------------------------------------------------------------------

    def _first_at_least(self, i: int, g: int) -> float:
        """Lower bound on when node i could start a job of g GPUs."""
        # enumerate, not zip(strict=True): building that zip cost more than the scan, and this
        # runs for every node each time a heap is built.
        for k, f in enumerate(self.free[i]):
            if f >= g:
                return self.times[i][k]
        return INF

    def _first_at_least_from(self, i: int, g: int, at: float) -> float:
        """Lower bound on when node i could start a job of g GPUs at `at` or later: the first
        time from `at` on that it has g GPUs free."""
        times, free = self.times[i], self.free[i]
        if at <= times[0]:
            return self._first_at_least(i, g)
        now = bisect_right(times, at, 1) - 1
        if free[now] >= g:
            return at
        for k in range(now + 1, len(free)):
            if free[k] >= g:
                return times[k]
        return INF

    def _fit(self, i: int, g: int, duration: float, at: float) -> float:
        """Earliest t >= at when node i has g GPUs free during [t, t + duration)."""
        if self.cap[i] < g:
            return INF
        times, free = self.times[i], self.free[i]
        n = len(times)
        k0 = bisect_right(times, at, 1) - 1  # lo=1: a time before the first step reads step 0
        start: float | None = None
        # Steps too full are only passed over: their bounds are read only where one fits.
        for k in range(k0, n):
            if free[k] >= g:
                if start is None:
                    start = times[k] if times[k] > at else at
                if (times[k + 1] if k + 1 < n else INF) - start >= duration:
                    return start
            else:
                start = None
        return INF if start is None else start

    def _fits_at(self, i: int, g: int, duration: float, at: float) -> bool:
        """Whether node i has g GPUs free during [at, at + duration): _fit(...) == at, without
        searching on for a later start when it has not."""
        times, free = self.times[i], self.free[i]
        if at < times[0]:
            return False  # _fit would start it at times[0]
        k = bisect_right(times, at, 1) - 1
        n = len(times)
        while True:
            if free[k] < g:
                return False
            k += 1
            # the same comparison as _fit's, so rounding cannot tell them apart
            if k >= n or times[k] - at >= duration:
                return True

    def _first_fit_now(self, g: int, duration: float, at: float) -> int:
        """The first node, in order, that can start a job of g GPUs at `at`; -1 if none.
        Scanned lazily: building the list of every node with a GPU free at each new planning
        time cost more than the scan, which mostly stops early."""
        when, cur = self._now
        if when != at:
            cur = 0
        times, free = self.times, self.free
        n = len(times)
        # Commits only ever fill nodes at `at`, so a full prefix can be skipped for good.
        while cur < n and free[cur][bisect_right(times[cur], at, 1) - 1] <= 0:
            cur += 1
        self._now = (at, cur)
        for i in range(cur, n):
            # Inlined prefilter (_fits_at's first test): most nodes fail it.
            if free[i][bisect_right(times[i], at, 1) - 1] >= g and self._fits_at(
                i, g, duration, at
            ):
                return i
        return -1

    def _free_at(self, i: int, at: float) -> int:
        return self.free[i][bisect_right(self.times[i], at, 1) - 1]

    def free_now(self, now_ts: float) -> int:
        return sum(max(0, self._free_at(i, now_ts)) for i in range(len(self.cap)))

    def _heap_max(self) -> int:
        """Entries (stale ones included) past which a size's heap is rebuilt."""
        return 4 * len(self.cap) + 64

    def _soon_heap(self, g: int, at: float) -> list[tuple[float, int, int]]:
        """The single-node search's heap for g GPUs, for a query from `at` on."""
        if at < self._soon_from:
            self._soon.clear()  # bounds raised for later queries may not hold for this one
        self._soon_from = at  # every bound in the heaps holds from here on
        h = self._soon.get(g)
        if h is None or len(h) > self._heap_max():
            h = [
                (self._first_at_least_from(i, g, at), i, self._version[i])
                for i in range(len(self.cap))
            ]
            heapq.heapify(h)
            self._soon[g] = h
        return h

    def _heap(self, g: int) -> list[tuple[float, int, int]]:
        h = self._heaps.get(g)
        if h is None or len(h) > self._heap_max():
            h = [(self._first_at_least(i, g), i, self._version[i]) for i in range(len(self.cap))]
            heapq.heapify(h)
            self._heaps[g] = h
        return h

    def earliest(
        self,
        gpus: int,
        not_before: float,
        duration: float,
        latest: float = INF,
        *,
        known_not_now: bool = False,
    ) -> Placement | None:
        """Earliest start of a job of `gpus` GPUs running `duration` s; None if it never fits,
        or (when `latest` is given) if it cannot start by then: callers that only need to know
        whether a job starts within its budget save the search past it."""
        if gpus <= 0:
            return Placement(not_before, (), ())
        if not_before != self._fails_at:
            self._fails.clear()
            self._fails_at = not_before
        fails = self._fails.get(gpus)  # latest -> shortest duration known not to start by then
        if fails is None:
            fails = self._fails[gpus] = {}
        if gpus > self.gpus_per_node:
            if fails.get(latest, INF) <= duration:
                return None
            p = self._earliest_multi(gpus, not_before, duration)
            if p is not None and p.start_ts <= latest:
                return p
            if latest < INF:
                fails[latest] = min(duration, fails.get(latest, INF))
            return None
        # 1. first fit among nodes that can start it at once
        if not known_not_now:
            if fails.get(not_before, INF) > duration:
                i = self._first_fit_now(gpus, duration, not_before)
                if i >= 0:
                    return Placement(not_before, (i,), (gpus,))
                if latest == not_before:
                    fails[not_before] = min(duration, fails.get(not_before, INF))
                    return None
            elif latest == not_before < INF:
                return None  # known not to start now, and now is all that was asked
        # 2. best start later: nodes in order of a lower bound, stop when it cannot win
        if latest < INF and fails.get(latest, INF) <= duration:
            return None
        h = self._soon_heap(gpus, not_before)
        best, best_i = INF, -1
        stale: list[tuple[float, int, int]] = []
        version, pop = self._version, heapq.heappop  # locals: this loop runs for every job
        while h:
            bound, i, ver = h[0]
            if ver != version[i]:
                pop(h)
                continue
            # A node that could tie with `best` is still looked at unless its index is higher,
            # so the lowest index wins whatever the age of the heap's bounds (they lag behind
            # trimming). Stopping at the first tie made placements depend on the queries asked
            # before. Entries bounded exactly at `best` come in index order: stop past best_i.
            if max(bound, not_before) > best or bound > latest:
                break
            if bound == best and i > best_i:
                break
            item = pop(h)
            t = self._fit(i, gpus, duration, not_before)
            if t < best or (t == best and i < best_i):
                best, best_i = t, i
            # Back with its bound raised to this query's time (a bound already past it is
            # as high as it gets): later queries, the simulator's at ever later times, then
            # skip nodes that had room only in the past.
            if bound < not_before:
                item = (self._first_at_least_from(i, gpus, not_before), i, ver)
            stale.append(item)
        for item in stale:
            heapq.heappush(h, item)
        if best_i < 0 or best == INF or best > latest:
            if latest < INF:
                fails[latest] = min(duration, fails.get(latest, INF))
            return None
        return Placement(best, (best_i,), (gpus,))

    def _nearest(self, g: int, m: int) -> list[int]:
        """Up to m nodes in order of their lower bound for g GPUs (the heap is left intact)."""
        h = self._heap(g)
        taken: list[tuple[float, int, int]] = []
        seen: set[int] = set()
        version, pop, push = self._version, heapq.heappop, heapq.heappush
        while h and len(seen) < m:
            item = pop(h)
            i = item[1]
            if item[2] != version[i] or i in seen:
                continue
            seen.add(i)
            taken.append(item)
        for item in taken:
            push(h, item)
        return [i for _, i, _ in taken]

    def _earliest_multi(self, gpus: int, not_before: float, duration: float) -> Placement | None:
        G = self.gpus_per_node
        full, rest = divmod(gpus, G)
        need = full + (1 if rest else 0)
        if need > len(self.cap):
            return None
        # Multi-node jobs are rare: look at the nodes that free up soonest (all of them in a
        # small cluster), try the times each could first hold a whole-node share, then the time
        # all their reservations are over.
        # First fit: among those nodes, in node order.
        # Up to NEAR_ALL nodes, all of them, so the choice cannot depend on the heap's history.
        m = max(NEAR_ALL, 4 * need + 16)
        near = sorted(self._nearest(G, m)) if len(self.cap) > m else list(range(len(self.cap)))
        if not rest:
            near_rest: list[int] = []
        elif len(self.cap) > m:
            near_rest = sorted(self._nearest(rest, m))
        else:
            near_rest = list(range(len(self.cap)))
        whole_from = {i: self._fit(i, G, duration, not_before) for i in near}
        firsts = sorted(set(whole_from.values()) - {INF})
        tail = max([not_before, *(self.times[i][-1] for i in near)])
        either = sorted({*near_rest, *near}) if rest else []
        for t in [*firsts[: 2 * need + 8], tail]:
            chosen = self._whole_nodes_at(near, whole_from, full, duration, t)
            if len(chosen) < full:
                continue
            each = [G] * full
            if rest:
                taken = set(chosen)
                extra = next(
                    (i for i in either if i not in taken and self._fits_at(i, rest, duration, t)),
                    -1,
                )
                if extra < 0:
                    continue
                chosen.append(extra)
                each.append(rest)
            return Placement(t, tuple(chosen), tuple(each))
        return None

    def _whole_nodes_at(
        self, nodes: list[int], whole_from: dict[int, float], k: int, duration: float, at: float
    ) -> list[int]:
        """The first k of `nodes` (in their order) with all their GPUs free during
        [at, at + duration). `whole_from[i]` is node i's earliest such start from `not_before`
        (<= at): a node that only gets there after `at` cannot hold it at `at`, so only the
        others are tested, and the search stops at the k-th."""
        out: list[int] = []
        if k <= 0:
            return out
        g = self.gpus_per_node
        for i in nodes:
            if whole_from[i] <= at and self._fits_at(i, g, duration, at):
                out.append(i)
                if len(out) == k:
                    break
        return out

    # ---- updates (mutate: the planner copies before it places anything) --------------------

    def _own(self, i: int) -> None:
        """Give node i its own step lists before changing them (copy on write)."""
        if self._shared[i]:
            self.times[i] = list(self.times[i])
            self.free[i] = list(self.free[i])
            self._shared[i] = False

    def _split(self, i: int, t: float) -> int:
        """Index of the step starting at t, inserting a breakpoint if needed."""
        times, free = self.times[i], self.free[i]
        k = bisect_right(times, t) - 1
        if k >= 0 and times[k] == t:
            return k
        if k < 0:
            times.insert(0, t)
            free.insert(0, self.cap[i])
            return 0
        times.insert(k + 1, t)
        free.insert(k + 1, free[k])
        return k + 1

    def adjust(self, i: int, start: float, end: float, delta: int) -> None:
        """Add `delta` free GPUs on node i during [start, end)."""
        if end <= start or delta == 0:
            return
        self._own(i)
        a = self._split(i, start)
        b = self._split(i, end) if end != INF else len(self.times[i])
        free = self.free[i]
        for k in range(a, b):
            free[k] += delta
        self._merge(i, a, b)
        self._version[i] += 1
        v = self._version[i]
        cap = self._heap_max()
        for size, h in list(self._heaps.items()):
            if len(h) >= cap:
                # _heap would rebuild it on its next use anyway: drop it now rather than let a
                # size nobody asks for grow with every change (and be copied on every pass).
                del self._heaps[size]
            else:
                heapq.heappush(h, (self._first_at_least(i, size), i, v))
        for size, h in list(self._soon.items()):
            if len(h) >= cap:
                del self._soon[size]  # as above
            else:
                heapq.heappush(h, (self._first_at_least_from(i, size, self._soon_from), i, v))
        if delta > 0:
            self._fails.clear()
            if start <= self._now[0] < end:
                self._now = (-INF, 0)  # a node may have room again

    def hold_from_start(self, i: int, holds: list[tuple[float, int]]) -> None:
        """Node i, untouched so far, with each (end, gpus) of `holds` taken from the profile's
        start until its end: the step function that `adjust(i, start, end, -gpus)` for each
        would leave, built with one sort instead of a list insertion and a merge per job (the
        planner does this for every running job of the cluster on every pass)."""
        times, free = self.times[i], self.free[i]
        start = times[0]
        fresh = len(times) == 1 and free[0] == self.cap[i] and not self._heaps and not self._soon
        if not fresh or not all(start < end < INF and gpus > 0 for end, gpus in holds):
            for end, gpus in holds:  # not the case this is for: take the general path
                self.adjust(i, start, end, -gpus)
            return
        released: dict[float, int] = {}  # end -> GPUs given back then
        for end, gpus in holds:
            released[end] = released.get(end, 0) + gpus
        level = free[0] - sum(released.values())
        new_times, new_free = [start], [level]
        # Every end gives GPUs back, so each is a step of its own: nothing to merge.
        for end in sorted(released):
            level += released[end]
            new_times.append(end)
            new_free.append(level)
        self.times[i], self.free[i] = new_times, new_free
        self._shared[i] = False
        self._version[i] += 1

    def _merge(self, i: int, a: int, b: int) -> None:
        """Join equal neighbours after steps a..b-1 of node i changed by one amount: no two
        neighbours are equal before a change, so only the steps at its two ends can be. From
        the first step on (a step may have been put in front, see _split), all are looked at."""
        times, free = self.times[i], self.free[i]
        if a == 0:
            k = 1
            while k < len(times):
                if free[k] == free[k - 1]:
                    del times[k]
                    del free[k]
                else:
                    k += 1
            return
        if b < len(times) and free[b] == free[b - 1]:
            del times[b]
            del free[b]
        if a > 0 and free[a] == free[a - 1]:
            del times[a]
            del free[a]

    def commit(self, placement: Placement, end_ts: float) -> None:
        """Reserve the placement's GPUs from its start until end_ts."""
        for i, g in zip(placement.nodes, placement.gpus_each, strict=True):
            self.adjust(i, placement.start_ts, end_ts, -g)

    def retime(self, placement: Placement, old_end: float, new_end: float) -> None:
        """A reservation ends at new_end instead of old_end (earlier: GPUs free up). One cut
        before its start is gone altogether: it gives back only what it held, from its start
        (freeing from new_end would add GPUs the node never had)."""
        new_end = max(new_end, placement.start_ts)
        for i, g in zip(placement.nodes, placement.gpus_each, strict=True):
            if new_end < old_end:
                self.adjust(i, new_end, old_end, g)
            else:
                self.adjust(i, old_end, new_end, -g)

    def forget_before(self, now_ts: float) -> None:
        """Drop steps that ended before now, keeping the lists short in long replays."""
        for i in range(len(self.cap)):
            times, free = self.times[i], self.free[i]
            k = bisect_right(times, now_ts) - 1
            if k > 0:
                self._own(i)
                times, free = self.times[i], self.free[i]
                del times[:k]
                del free[:k]
