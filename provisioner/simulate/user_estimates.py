"""User runtime estimates (Slurm time limits) for traces that carry none: the model of Tsafrir,
Etsion and Feitelson, "Modeling User Runtime Estimates", JSSPP 2005 (LNCS 3834, pp. 1-35),
with the parameters the paper fits (the defaults of the authors' own implementation, published
with the paper in the Parallel Workloads Archive's models, m_tsafrir05). This is our own code.

What users give as estimates is modal: about 20 values carry 89% of the jobs, the most popular
being the system's maximum, and the others round values (5, 10, 15, 20, 30 minutes; 1, 2, ...,
18 hours). The model, given only the number of jobs and the maximum estimate:

1. Bins: how many distinct estimates (K), linear between the paper's points (jobs, bins):
   (0, 0), (20, 10), (200, 20), (1000, 35), (10000, 90), (70000, 340), (250000, 565).
2. Head (the 20 most popular): the maximum; the 15 values found in all four traces the paper
   studied that are below it; then round multiples of 200 h, 100 h, 50 h, 10 h, 5 h, 2 h, 1 h,
   20, 10 and 5 minutes, down from the maximum, until there are 20. Their shares: popularity
   rank x = 2..20 holds 14.0491 e^(-0.177531 x) + 0.462513 percent of the jobs, and rank 1 the
   rest of 89%. Which time gets which rank follows the four traces' table of time rank to
   popularity rank: the maximum is rank 1; each other time, in time order, draws a rank from
   the ranks those traces gave that time rank or earlier ones (the smaller of two draws), and
   takes at once a rank no trace let come later.
3. Tail (ranks 21..K): times (a-1)x / (a-x) of the maximum for x = i / (K - 20), aligned to the
   minute (nudged by 30, 20 or 10 s to keep them distinct), a = 1 + 12.1039 K^-0.6026; shares
   795.6 x^-2.267 for rank x, scaled to the remaining 11%, matched to the times at random.
4. Counts: each share of the jobs, at least one job a bin, rounded; the difference from the
   number of jobs is taken from (or given to) the largest bins.
5. Assignment: jobs by runtime, longest first, each draw an estimate at random among those
   not yet taken that are at least its runtime. An estimate is never below the runtime; a
   runtime above the maximum is an error (the maximum is too small for the trace).

Simplified: no user-supplied bins (the paper's optional hints), and step 4's balancing is a
plain largest-bins-first rule. Seeded: the same seed gives the same estimates.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence

from provisioner.domain.errors import InvalidArgument

MIN = 60
HOUR = 3600
TOP = 20
HEAD_SHARE_PCT = 89.0
HEAD_SIZE = (14.0491, -0.177531, 0.462513)  # size(x) = a e^(b x) + c, x = rank 2..20
TAIL_SIZE = (795.6, -2.267)  # size(x) = a x^b, x = rank 21..
TIME_SHAPE = (12.1039, -0.6026)  # a = 1 + p K^q
BINS_BY_JOBS = ((0, 0), (20, 10), (200, 20), (1000, 35), (10000, 90), (70000, 340), (250000, 565))
# in every one of the four traces' top 20, in order of popularity there
JOINT = (5 * MIN, 15 * MIN, 10 * MIN, 20 * MIN, 30 * MIN, HOUR, 2 * HOUR, 3 * HOUR, 4 * HOUR,
         5 * HOUR, 6 * HOUR, 8 * HOUR, 10 * HOUR, 12 * HOUR, 18 * HOUR)  # fmt: skip
ROUND = (200 * HOUR, 100 * HOUR, 50 * HOUR, 10 * HOUR, 5 * HOUR, 2 * HOUR, HOUR,
         20 * MIN, 10 * MIN, 5 * MIN)  # fmt: skip
# time rank (0: the maximum, then shortest first) -> popularity rank, in SDSC, CTC, KTH, Blue
TIME_RANK_TO_POPULARITY = (
    (3, 1, 1, 1), (1, 3, 4, 6), (4, 4, 10, 5), (17, 2, 14, 3), (13, 12, 20, 7), (7, 9, 2, 2),
    (8, 8, 3, 18), (18, 18, 7, 19), (2, 6, 12, 4), (6, 7, 6, 11), (16, 11, 19, 20),
    (10, 20, 5, 9), (5, 16, 18, 10), (15, 5, 16, 14), (14, 14, 9, 13), (19, 13, 17, 16),
    (11, 10, 15, 15), (12, 15, 13, 17), (9, 17, 8, 8), (20, 19, 11, 12),
)  # fmt: skip


def bin_count(njobs: int) -> int:
    """K, the number of distinct estimates for `njobs` jobs (step 1)."""
    last_jobs, last_bins = BINS_BY_JOBS[-1]
    if njobs > last_jobs:
        return last_bins
    for (x0, y0), (x1, y1) in itertools.pairwise(BINS_BY_JOBS):
        if njobs <= x1:
            return y0 + round((njobs - x0) * (y1 - y0) / (x1 - x0))
    return last_bins  # pragma: no cover - the loop covers every njobs <= last_jobs


def head_times(max_s: int) -> list[int]:
    """The maximum, then up to 19 more popular times below it, shortest first (step 2)."""
    times = [max_s] + [t for t in JOINT if t < max_s]
    for step in ROUND:
        t = (max_s // step) * step
        while t > 0 and len(times) < TOP:
            if t not in times:
                times.append(t)
            t -= step
        if len(times) >= TOP:
            break
    return [times[0], *sorted(times[1:])]


def head_shares(n: int) -> list[float]:
    """Percent of jobs of popularity ranks 1..n (step 2), most popular first."""
    a, b, c = HEAD_SIZE
    rest = [a * math.exp(b * x) + c for x in range(2, n + 1)]
    return sorted([HEAD_SHARE_PCT - sum(rest), *rest], reverse=True)


def popularity_ranks(n: int, rng: random.Random) -> list[int]:
    """A popularity rank (1..n) for each of the head's time ranks (0: the maximum)."""
    due: dict[int, int] = {}  # rank -> the last time rank any trace gave it
    for t in range(TOP - 1, -1, -1):
        for rank in TIME_RANK_TO_POPULARITY[t]:
            due.setdefault(rank, t)
    chosen: list[int] = []
    pool: list[int] = []
    for t in range(n):
        pool += [r for r in TIME_RANK_TO_POPULARITY[t] if r <= n and r not in chosen]
        pick = 1 if t == 0 else None
        if pick is None:
            pick = next((r for r in range(1, n + 1) if due.get(r, TOP) <= t and r not in chosen),
                        None)  # fmt: skip
        if pick is None:
            free = [r for r in pool if r not in chosen] or [
                r for r in range(1, n + 1) if r not in chosen
            ]
            pick = min(rng.choice(free), rng.choice(free))  # favour the more popular
        chosen.append(pick)
        pool = [r for r in pool if r != pick]
    return chosen


def tail_bins(max_s: int, head: set[int], k: int, rng: random.Random) -> dict[int, float]:
    """Times of ranks 21..K and their shares of the jobs (step 3)."""
    n = k - len(head)
    if n <= 0:
        return {}
    p, q = TIME_SHAPE
    a = 1 + p * k**q
    times: list[int] = []
    for i in range(1, n + 1):
        x = i / n
        base = round((a - 1) * x / (a - x) * max_s / 60.0) * 60
        for off in (0, 30, -30, 20, -20, 10, -10):
            t = base + off
            if 0 < t < max_s and t not in head and t not in times:
                times.append(t)
                break
    ta, tb = TAIL_SIZE
    sizes = [ta * (TOP + 1 + i) ** tb for i in range(len(times))]
    scale = (100.0 - HEAD_SHARE_PCT) / sum(sizes) if sizes else 0.0
    sizes = [s * scale for s in sizes]
    rng.shuffle(times)
    rng.shuffle(sizes)
    return dict(zip(times, sizes, strict=True))


def estimate_distribution(njobs: int, max_s: int, rng: random.Random) -> dict[int, int]:
    """Estimate (seconds) -> how many jobs give it, summing to `njobs` (steps 1-4)."""
    if max_s < HOUR:
        raise InvalidArgument(f"maximum estimate {max_s} s: the model needs at least an hour")
    if njobs <= 0:
        return {}
    k = max(bin_count(njobs), 1)
    times = head_times(max_s)[: min(TOP, k)]
    shares = head_shares(len(times))
    ranks = popularity_ranks(len(times), rng)
    pct = {t: shares[r - 1] for t, r in zip(times, ranks, strict=True)}
    pct.update(tail_bins(max_s, set(times), k, rng))
    counts = {t: max(1, round(p * njobs / 100.0)) for t, p in pct.items()}
    _balance(counts, njobs)
    return {t: c for t, c in sorted(counts.items()) if c > 0}


def _balance(counts: dict[int, int], njobs: int) -> None:
    """Make the counts sum to `njobs`: the largest bins give (keeping one while they can) or
    take the difference."""
    diff = njobs - sum(counts.values())
    floor = 1
    while diff != 0:
        order = sorted(counts, key=lambda t: (-counts[t], t))
        moved = False
        for t in order:
            if diff > 0:
                counts[t] += 1
                diff -= 1
                moved = True
            elif counts[t] > floor:
                counts[t] -= 1
                diff += 1
                moved = True
            if diff == 0:
                break
        if not moved:
            floor = 0  # more bins than jobs: some bins go empty


def assign_estimates(runtimes: Sequence[float], max_s: int, seed: int) -> list[float]:
    """One estimate per job, in the order given, each at least its runtime (step 5)."""
    if any(r > max_s for r in runtimes):
        longest = max(runtimes)
        raise InvalidArgument(
            f"maximum estimate {max_s} s: a runtime of {longest:.0f} s is longer; give a "
            "maximum at least the trace's longest runtime"
        )
    rng = random.Random(seed)
    dist = estimate_distribution(len(runtimes), max_s, rng)
    ests = sorted((t for t, c in dist.items() for _ in range(c)), reverse=True)
    order = sorted(range(len(runtimes)), key=lambda i: (-runtimes[i], i))
    out = [0.0] * len(runtimes)
    hi = 0
    for j, i in enumerate(order):
        if ests[j] < runtimes[i]:
            raise InvalidArgument(
                f"maximum estimate {max_s} s: too many runtimes near it for the model's share "
                "at the maximum; give a larger maximum"
            )
        hi = max(hi, j)
        while hi + 1 < len(ests) and ests[hi + 1] >= runtimes[i]:
            hi += 1
        k = rng.randint(j, hi)
        out[i] = float(ests[k])
        ests[j], ests[k] = ests[k], ests[j]
    return out
