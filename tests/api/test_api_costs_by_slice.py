"""GET /v1/costs groups by slice (the part of a GPU a job held) like any key, in JSON and CSV,
and the console's cost page charts it by hour. Values by hand.

Beside the seed (api_helpers.seed, on 2026-01-10): on 2026-01-05 an 8-GPU instance at $56/h
($7 a GPU-hour) runs one hour; job `mig` (team vision) holds one 1g.10gb device, 1/7 of a GPU:
$1.00; job `whole` (team nlp) one whole GPU: $7.00; the other $48.00 is idle, the instance's
team's (vision).
"""

from __future__ import annotations

import csv
import io
import json
import re
from decimal import Decimal

import pytest
from api_helpers import OTHER, POLICY, T0, Env
from test_console_http import sign_in

from provisioner.account.ledger import Accountant
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.records import JobUsage

D5 = T0 + 4 * 86_400.0  # 2026-01-05T00:00:00Z
DAY5 = {"from": "2026-01-05", "to": "2026-01-06"}


@pytest.fixture
def sliced(fresh: Env) -> Env:
    store = fresh.store
    inst = CloudInstance(
        "i-9", "gcp-a100", OTHER, "A100", 8, Decimal("56"), InstanceState.ALLOCATED, D5,
        node_name="cloud-9",
    )  # fmt: skip
    store.add_instance(inst, team="vision")
    store.record_job_usage(
        [
            JobUsage("mig", "cloud-9", 0, D5, D5 + 3600, instance_id="i-9", team="vision",
                     part_gpus=1 / 7, gpu_part="1g.10gb"),
            JobUsage("whole", "cloud-9", 1, D5, D5 + 3600, instance_id="i-9", team="nlp"),
        ]
    )  # fmt: skip
    store.transition("i-9", InstanceState.TERMINATED, D5 + 3600, "test")
    Accountant(store, POLICY).run(D5 + 7200)
    return fresh


def test_costs_by_slice_and_team(sliced: Env):
    h = sliced.h("viewer")
    body = sliced.client.get(
        "/v1/costs", params={"group_by": "slice,team", **DAY5}, headers=h
    ).json()
    assert body["group_by"] == ["slice", "team"]
    assert [(r["slice"], r["team"], r["cost_usd"], r["ledger_rows"]) for r in body["rows"]] == [
        ("", "nlp", "7.000000", 1),
        ("", "vision", "48.000000", 1),
        ("1g.10gb", "vision", "1.000000", 1),
    ]
    assert body["total_usd"] == "56.000000"
    text = sliced.client.get(
        "/v1/costs", params={"group_by": "slice", "format": "csv", **DAY5}, headers=h
    ).text
    assert list(csv.reader(io.StringIO(text))) == [
        ["slice", "cost_usd", "ledger_rows"],
        ["", "55.000000", "2"],
        ["1g.10gb", "1.000000", "1"],
    ]
    # the seed's rows (whole GPUs only, on 2026-01-10) have no slice
    seed = sliced.client.get(
        "/v1/costs",
        params={"group_by": "slice", "from": "2026-01-10", "to": "2026-01-11"},
        headers=h,
    ).json()
    assert [r["slice"] for r in seed["rows"]] == [""]


def test_the_cost_page_charts_slices_by_hour(sliced: Env):
    sign_in(sliced, "viewer")
    page = sliced.client.get("/costs", params={"group_by": "slice", **DAY5})
    assert page.status_code == 200
    assert "By slice and hour (UTC)" in page.text
    assert '<option value="slice" selected>Slice</option>' in page.text  # the page offers it
    chart = json.loads(re.search(r'id="cost-data">([^<]+)</script>', page.text).group(1))
    per = {
        d["label"]: dict(zip(chart["labels"], d["data"], strict=True)) for d in chart["datasets"]
    }
    assert per["1g.10gb"]["01-05 00:00"] == pytest.approx(1.0)
    assert sum(v or 0 for v in per["1g.10gb"].values()) == pytest.approx(1.0)
