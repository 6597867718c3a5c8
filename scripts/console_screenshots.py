"""Refresh the console screenshots in docs/img/console from the browser tests' shots.

The browser tests (`make test-browser`, and tests/e2e/test_e2e_console_browser.py) save every
page they visit at 1440 px wide to .screenshots/ (ignored by git). This keeps one shot per page,
scaled to 1000 px, cut to the first 1500 px of height and reduced to 256 colours, so the
documentation stays light. Pillow comes with matplotlib (a dependency).

    .venv/bin/python scripts/console_screenshots.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from PIL import Image

REPO = Path(__file__).resolve().parents[1]
SHOTS = REPO / ".screenshots"
OUT = REPO / "docs" / "img" / "console"
WIDTH = 1000
MAX_HEIGHT = 1500

# (the test's shot, the name in docs/img/console)
PAGES = (
    ("overview-viewer", "overview"),
    ("costs-viewer", "costs"),
    ("ledger-from-costs", "ledger"),
    ("budgets-viewer", "budgets"),
    ("decisions-viewer", "decisions"),
    ("jobs-viewer", "jobs"),
    ("e2e-job", "job"),
    ("instances-viewer", "instances"),
    ("e2e-instance", "instance"),
    ("gpus-viewer", "gpus"),
    ("iac-viewer", "iac"),
    ("whatif-example", "whatif"),
)


def shrink(src: Path, dst: Path) -> int:
    with Image.open(src) as im:
        rgb = im.convert("RGB")
        height = round(rgb.height * WIDTH / rgb.width)
        small = rgb.resize((WIDTH, height), Image.Resampling.LANCZOS)
        small = small.crop((0, 0, WIDTH, min(height, MAX_HEIGHT)))
        small.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(dst, optimize=True)
    return dst.stat().st_size


def main() -> int:
    missing = [shot for shot, _ in PAGES if not (SHOTS / f"{shot}.png").exists()]
    if missing:
        print(f"{SHOTS}: no shot of {', '.join(missing)}; run the browser tests first")
        return 1
    OUT.mkdir(parents=True, exist_ok=True)
    sizes = {name: shrink(SHOTS / f"{shot}.png", OUT / f"{name}.png") for shot, name in PAGES}
    print(json.dumps({"pages": len(sizes), "bytes": sum(sizes.values())}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
