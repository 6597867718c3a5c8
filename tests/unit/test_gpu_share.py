"""MIG profiles from GRES type names, and the slices a share of a GPU needs (NVIDIA MIG User
Guide: 7 compute slices; profiles 1g, 2g, 3g, 4g, 7g)."""

from __future__ import annotations

import pytest

from provisioner.domain.errors import InvalidArgument
from provisioner.domain.gpu_share import mig_profile_of, slices_for_milli


@pytest.mark.parametrize(
    ("gres_type", "slices", "memory_gb"),
    [
        ("1g.10gb", 1, 10),
        ("nvidia_a100_3g.40gb", 3, 40),
        ("nvidia_h100_80gb_hbm3_2g.20gb", 2, 20),
        ("7G.80GB", 7, 80),
        ("a100-sxm4-40gb_1g.5gb", 1, 5),
    ],
)
def test_mig_profile_is_read_from_the_type(gres_type: str, slices: int, memory_gb: int) -> None:
    p = mig_profile_of(gres_type)
    assert p is not None and (p.slices, p.memory_gb) == (slices, memory_gb)
    assert p.name == f"{slices}g.{memory_gb}gb"


@pytest.mark.parametrize("gres_type", ["a100", "", "5g.40gb", "tesla_t4", "h100_80gb"])
def test_a_type_naming_no_profile_is_none(gres_type: str) -> None:
    assert mig_profile_of(gres_type) is None


@pytest.mark.parametrize(
    ("milli", "slices"),
    # 7 * milli / 1000, rounded up to the next profile
    [
        (50, 1),
        (140, 1),
        (143, 2),
        (290, 3),
        (320, 3),
        (470, 4),
        (550, 4),
        (590, 7),
        (810, 7),
        (1000, 7),
    ],
)
def test_a_share_takes_its_smallest_profile(milli: int, slices: int) -> None:
    assert slices_for_milli(milli) == slices


@pytest.mark.parametrize("milli", [0, -5, 1001])
def test_a_share_outside_one_gpu_is_refused(milli: int) -> None:
    with pytest.raises(InvalidArgument, match=f"gpu_milli {milli}"):
        slices_for_milli(milli)
