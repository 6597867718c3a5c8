"""Running focus-validator 1.0 on a FOCUS export: shared by the account and end-to-end tests."""

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
