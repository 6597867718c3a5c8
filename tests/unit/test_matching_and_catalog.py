"""The offer predicate and the pinned catalog."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from provisioner.domain.errors import InputError
from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.plan.catalog import load_catalog
from provisioner.plan.matching import OfferRequest, offer_fits
from tests.unit.helpers import offer

OD, SPOT = CapacityType.ON_DEMAND, CapacityType.SPOT


@pytest.mark.parametrize(
    ("req", "cap", "fits"),
    [
        (OfferRequest(8, "A100"), OD, True),
        (OfferRequest(9, "A100"), OD, False),  # more GPUs than the node has
        (OfferRequest(1, "a100"), SPOT, True),  # model match ignores case
        (OfferRequest(1, "H100"), OD, False),
        (OfferRequest(1, "H100", equivalent_models=("A100",)), OD, True),
        (OfferRequest(1, None, min_gpu_mem_gb=80), OD, False),
        (OfferRequest(1, None, min_gpu_mem_gb=40), OD, True),
        (OfferRequest(1, "A100", clouds=("gcp",)), OD, False),
        (OfferRequest(1, "A100", regions=("us-west-2",)), OD, False),
        (OfferRequest(1, "A100", instance_types=("p4d.24xlarge",)), OD, True),
        (OfferRequest(1, "A100", capacity=OD), SPOT, False),  # spot not allowed
    ],
)
def test_offer_fits(req: OfferRequest, cap: CapacityType, fits: bool) -> None:
    assert offer_fits(offer(), req, cap) is fits


def test_spot_needs_a_spot_price_and_fractions_never_fit() -> None:
    assert not offer_fits(offer(spot=None), OfferRequest(1, "A100"), SPOT)
    assert not offer_fits(offer(gpus=0.5), OfferRequest(1, "A100"), OD)


def test_pinned_catalog_loads_normalised_offers() -> None:
    cat = load_catalog()
    assert len(cat) == 1882
    p4d = [o for o in cat if o.instance_type == "p4d.24xlarge" and o.region == "us-east-1"]
    assert len(p4d) == 1
    o = p4d[0]
    assert (o.cloud, o.gpu_model, o.gpus_per_node, o.vcpus) == ("aws", "A100", 8.0, 96)
    assert o.ondemand_usd_hr == Decimal("21.95764")
    assert isinstance(o.spot_usd_hr, Decimal)
    assert o.spot_interruption_pct_max is not None
    assert all(x.spot_interruption_pct_max is None for x in cat if x.cloud == "gcp")
    assert len(cat.for_model("a100")) == 375
    # GCP T4 on N1 hosts (issue 32): the host's price plus the T4's, us-central1
    t4 = {o.instance_type: o for o in cat.for_model("t4") if o.region == "us-central1"}
    assert t4["n1-standard-4"].ondemand_usd_hr == Decimal("0.19") + Decimal("0.35")
    assert t4["n1-standard-32"].gpus_per_node == 4


def test_catalog_errors_name_file_line_and_column(tmp_path: Path) -> None:
    f = tmp_path / "c.csv"
    f.write_text(
        "cloud,region,instance_type,gpu_model,gpu_count,gpu_mem_gb,vcpus,mem_gb,"
        "ondemand_usd_hr,spot_usd_hr\naws,us-east-1,p4d,A100,8,40,96,1152,cheap,\n"
    )
    with pytest.raises(InputError, match=r"c\.csv: line 2: ondemand_usd_hr: not a number"):
        load_catalog(f)
    with pytest.raises(InputError, match="cannot read catalog"):
        load_catalog(tmp_path / "missing.csv")


def test_offer_key_round_trip() -> None:
    key = OfferKey("gcp", "us-central1", "a2-highgpu-1g", SPOT)
    assert OfferKey.parse(str(key)) == key
    with pytest.raises(ValueError):
        OfferKey.parse("aws/us-east-1")
