"""docs/architecture.md draws a plan's path from the import graph; the drawing must match the
code today (scripts/architecture_diagram.py regenerates it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_actuation_diagram_in_the_docs_matches_the_imports() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "architecture_diagram.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
