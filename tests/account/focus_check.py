"""Running focus-validator on a FOCUS export: 1.0.0 (FOCUS 1.0 rules, `.venv-focus`) and 2.2.1
(FOCUS 1.2 rules, Python 3.12, `.venv-focus2`); shared by the account, end-to-end and browser
tests. Both are installed by `make focus-venv`; under `REQUIRE_FOCUS_VALIDATOR` (set by
`make test`) a missing validator fails the test instead of skipping it."""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def find_validator() -> str | None:
    for cand in (
        os.environ.get("FOCUS_VALIDATOR"),
        str(REPO / ".venv-focus" / "bin" / "focus-validator"),
        shutil.which("focus-validator"),
    ):
        if cand and Path(cand).exists():
            return cand
    return None


def require_validator() -> str:
    """The validator's path; skip the test (or fail under REQUIRE_FOCUS_VALIDATOR) without it."""
    exe = find_validator()
    if exe is None:
        if os.environ.get("REQUIRE_FOCUS_VALIDATOR"):
            pytest.fail("focus-validator not found (set FOCUS_VALIDATOR or make .venv-focus)")
        pytest.skip("focus-validator is not installed (see docs/api.md: FOCUS export)")
    return exe


def validator_site(exe: str) -> str:
    """focus-validator 1.0.0 reads its currency list relative to the working directory."""
    py = Path(exe).parent / "python"
    return subprocess.run(
        [
            str(py),
            "-c",
            "import focus_validator, os; "
            "print(os.path.dirname(os.path.dirname(focus_validator.__file__)))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()


def validate_focus(exe: str, data: Path, out: Path, site: str) -> ET.Element:
    """Validate `data` against FOCUS 1.0, asserting no failures; the unittest report's root."""
    proc = subprocess.run(
        [
            exe,
            "--data-file",
            str(data),
            "--validate-version",
            "1.0",
            "--output-type",
            "unittest",
            "--output-destination",
            str(out),
        ],
        cwd=site,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    suites = ET.parse(out).getroot()
    failed = [
        tc.get("name")
        for tc in suites.iter("testcase")
        if tc.find("failure") is not None or tc.find("error") is not None
    ]
    assert failed == []
    assert suites.get("failures") == "0" and suites.get("errors") == "0"
    return suites


# focus-validator 2.2.1's FOCUS 1.2 model checks InvoiceId-C-004-C (MUST be null) and
# InvoiceId-C-005-C (MUST NOT be null) on every row with no condition: one of them fails on any
# export carrying the column. The export's InvoiceId is null (no invoice is issued), so C-005 is
# the one; everything else must pass. See provisioner/account/focus.py.
KNOWN_1_2_FAILURES = ["InvoiceId-C-005-C"]


def find_validator_1_2() -> str | None:
    for cand in (
        os.environ.get("FOCUS_VALIDATOR_1_2"),
        str(REPO / ".venv-focus2" / "bin" / "focus-validator"),
    ):
        if cand and Path(cand).exists():
            return cand
    return None


def require_validator_1_2() -> str:
    exe = find_validator_1_2()
    if exe is None:
        if os.environ.get("REQUIRE_FOCUS_VALIDATOR"):
            pytest.fail(
                "focus-validator 2.2.1 not found (set FOCUS_VALIDATOR_1_2 or make focus-venv)"
            )
        pytest.skip("focus-validator 2.2.1 is not installed (make focus-venv)")
    return exe


def validate_focus_1_2(exe: str, data: Path, out: Path) -> dict[str, int]:
    """Validate `data` against FOCUS 1.2, offline; assert that only the known contradictory
    rule fails. Returns the counts (tests, failures, skipped, passed)."""
    proc = subprocess.run(
        [
            exe,
            "--data-file",
            str(data),
            "--validate-version",
            "1.2",
            "--block-download",
            "--output-type",
            "unittest",
            "--output-destination",
            str(out),
        ],
        cwd=validator_site(exe),  # it reads its currency list relative to the working directory
        capture_output=True,
        text=True,
        timeout=600,
    )
    # 2.2.1 exits 0 even when rules fail: the report is what counts.
    assert proc.returncode == 0, proc.stderr[-3000:]
    suites = ET.parse(out).getroot()
    failed = sorted(
        str(f.get("name"))
        for tc in suites.iter("testcase")
        for f in (*tc.findall("failure"), *tc.findall("error"))
    )
    assert failed == KNOWN_1_2_FAILURES, failed
    counts = {k: int(suites.get(k) or 0) for k in ("tests", "failures", "errors", "skipped")}
    assert counts["failures"] == len(KNOWN_1_2_FAILURES) and counts["errors"] == 0
    counts["passed"] = counts["tests"] - counts["failures"] - counts["skipped"]
    return counts
