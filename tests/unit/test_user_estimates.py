"""Time limits for traces without them: the model of Tsafrir, Etsion and Feitelson (JSSPP
2005), checked against the paper's own figures, typed in here: 89% of jobs on the 20 most
popular estimates, the maximum the most popular of them with what ranks 2..20 leave, the
round values found in every trace among them, and no estimate below its runtime."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from provisioner.domain.errors import InvalidArgument
from provisioner.simulate.user_estimates import assign_estimates, bin_count

H, M = 3600, 60
MAX = 18 * H
# the paper's head model: rank x = 2..20 holds 14.0491 e^(-0.177531 x) + 0.462513 percent
RANKS_2_TO_20 = sum(14.0491 * math.exp(-0.177531 * x) + 0.462513 for x in range(2, 21))
AT_MAX_PCT = 89.0 - RANKS_2_TO_20  # about 21.7%
ROUND_VALUES = (5 * M, 10 * M, 15 * M, 20 * M, 30 * M, 1 * H, 2 * H, 3 * H, 4 * H, 5 * H,
                6 * H, 8 * H, 10 * H, 12 * H)  # fmt: skip


def runtimes(n: int, seed: int) -> list[float]:
    """Heavy-tailed runtimes (log-uniform, 1 min to 16 h), all below the maximum."""
    rng = random.Random(seed)
    return [math.exp(rng.uniform(math.log(60), math.log(16 * H))) for _ in range(n)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_estimates_follow_the_papers_figures(seed: int) -> None:
    n = 10_000
    truth = runtimes(n, seed)
    ests = assign_estimates(truth, MAX, seed)
    counts = Counter(ests)
    assert 20 < AT_MAX_PCT < 23
    assert abs(100 * counts[MAX] / n - AT_MAX_PCT) < 0.5  # the share at the maximum
    top20 = sum(c for _, c in counts.most_common(20))
    assert abs(100 * top20 / n - 89.0) < 0.5  # the head's share
    assert counts.most_common(1)[0][0] == MAX  # the maximum is the most popular
    assert set(ROUND_VALUES) <= set(counts)  # the round values are all used
    assert all(e >= r for e, r in zip(ests, truth, strict=True))  # never below the runtime
    assert max(ests) == MAX and len(counts) <= bin_count(n) == 90  # (10,000 jobs: 90 bins)


def test_seeded_and_bounded_by_the_maximum() -> None:
    truth = runtimes(2000, 9)
    assert assign_estimates(truth, MAX, 4) == assign_estimates(truth, MAX, 4)
    assert assign_estimates(truth, MAX, 4) != assign_estimates(truth, MAX, 5)
    assert bin_count(1000) == 35 and bin_count(5000) == 59 and bin_count(10**6) == 565


def test_a_maximum_the_trace_does_not_fit_is_a_clear_error() -> None:
    with pytest.raises(InvalidArgument, match="at least an hour"):
        assign_estimates([60.0], 1800, 1)
    with pytest.raises(InvalidArgument, match="a runtime of 72000 s is longer"):
        assign_estimates([60.0, 72_000.0], MAX, 1)
    # nearly every job close to the maximum: more than the model puts at it
    with pytest.raises(InvalidArgument, match="larger maximum"):
        assign_estimates([MAX - 1.0] * 500, MAX, 1)
