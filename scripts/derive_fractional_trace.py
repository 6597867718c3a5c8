"""Write the bundled Philly trace's fractional variant (the rule: simulate/fractional_variant.py).

Usage: python scripts/derive_fractional_trace.py [OUT]  (default: the bundled path). The output is
byte-for-byte reproducible: gzip with no name and no time in its header.
"""

from __future__ import annotations

import csv
import gzip
import io
import sys
from pathlib import Path

from provisioner.simulate.fractional_variant import fractional_variant
from provisioner.simulate.trace import load_trace

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "data" / "traces" / "philly_2017-10-02_4w.csv.gz"
OUT = ROOT / "data" / "traces" / "philly_2017-10-02_4w_fractional.csv.gz"


def derive(source: Path = SOURCE) -> bytes:
    with gzip.open(source, "rt", encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    jobs = fractional_variant(load_trace(source))
    by_id = {j.job_id: j for j in jobs}
    buf = io.StringIO()
    cols = [*rows[0].keys(), "gpu_milli"]
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for row in rows:
        job = by_id[row["job_id"]]
        w.writerow({**row, "gpu_milli": job.gpu_milli if job.fractional else ""})
    return gzip.compress(buf.getvalue().encode(), mtime=0)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    out.write_bytes(derive())
    print(out)


if __name__ == "__main__":
    main()
