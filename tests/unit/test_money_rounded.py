"""`rounded(value, places)` is a faster `Decimal(repr(round(value, places)))`: the same digits
and the same exponent, so prices, decision details and ledger sums do not change."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from provisioner.domain.money import rounded

EDGES = [0.0, -0.0, 3.0, 1e-7, 5e-5, -1e-9, 0.1 + 0.2, 2.675, 1.0000005, 0.0000005, 7.5e-4,
         123456789.1234565, 999999999.9999995, -999999999.9, 1e9, 1e12 + 0.5, 1e16]  # fmt: skip


@pytest.mark.parametrize("places", [3, 6])
def test_rounded_matches_repr_of_round(places: int) -> None:
    rng = random.Random(7)
    values = EDGES + [rng.uniform(0, 1e6) for _ in range(20_000)]
    values += [rng.uniform(-1, 1) * 10 ** rng.randint(-12, 10) for _ in range(20_000)]
    for v in values:
        want = Decimal(repr(round(v, places)))
        got = rounded(v, places)
        assert got.as_tuple() == want.as_tuple(), (v, places, got, want)
        assert str(got) == str(want)


def test_rounded_keeps_one_place_after_the_point_as_repr_does() -> None:
    assert str(rounded(3.0, 6)) == "3.0"
    assert str(rounded(2.5000001, 3)) == "2.5"
    assert str(rounded(-0.0000001, 6)) == "-0.0"
