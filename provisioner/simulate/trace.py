"""GPU job traces: CSV `job_id,submit_s,duration_s,gpus,gpu_type,user,group,status` (.gz ok)."""

from __future__ import annotations

import csv
import gzip
import io
from dataclasses import dataclass
from pathlib import Path

from provisioner.domain.errors import InputError

REQUIRED = ("job_id", "submit_s", "duration_s", "gpus")


@dataclass(frozen=True, slots=True)
class TraceJob:
    job_id: str
    submit_s: float
    duration_s: float
    gpus: int
    gpu_type: str = ""
    user: str = ""
    group: str = ""


def _open(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return path.open(newline="", encoding="utf-8")  # type: ignore[return-value]


def load_trace(path: str | Path, limit: int | None = None) -> list[TraceJob]:
    """Read a trace, sorted by (submit_s, job_id). Errors name the file, line and column."""
    p = Path(path)
    jobs: list[TraceJob] = []
    try:
        with _open(p) as fh:
            reader = csv.DictReader(fh)
            cols = reader.fieldnames or []
            missing = [c for c in REQUIRED if c not in cols]
            if missing:
                raise InputError(f"{p}: missing column(s) {', '.join(missing)} in the header")
            for line, row in enumerate(reader, start=2):
                jobs.append(_row(row, p, line))
                if limit is not None and len(jobs) >= limit:
                    break
    except (EOFError, gzip.BadGzipFile) as exc:
        raise InputError(f"{p}: corrupt gzip file ({exc})") from None
    except OSError as exc:
        raise InputError(f"{p}: cannot read trace ({exc.strerror or exc})") from None
    jobs.sort(key=lambda j: (j.submit_s, j.job_id))
    return jobs


def _row(row: dict[str, str], p: Path, line: int) -> TraceJob:
    def num(col: str) -> float:
        raw = row.get(col)
        try:
            return float(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise InputError(f"{p}: line {line}: {col}: not a number: {raw!r}") from None

    submit, duration, gpus = num("submit_s"), num("duration_s"), num("gpus")
    if submit < 0:
        raise InputError(f"{p}: line {line}: submit_s: must be >= 0")
    if duration <= 0:
        raise InputError(f"{p}: line {line}: duration_s: must be > 0")
    if gpus < 1 or gpus != int(gpus):
        raise InputError(f"{p}: line {line}: gpus: must be a whole number >= 1")
    return TraceJob(
        job_id=row["job_id"],
        submit_s=submit,
        duration_s=duration,
        gpus=int(gpus),
        gpu_type=row.get("gpu_type") or "",
        user=row.get("user") or "",
        group=row.get("group") or "",
    )
