"""GPU job traces: CSV `job_id,submit_s,duration_s,gpus,gpu_type,user,group,status` (.gz ok).

An optional `gpu_milli` column gives a one-GPU job's share of its GPU in thousandths, as public
cluster traces write it (Alibaba's cluster-trace-gpu-v2023): empty or 1000 is a whole GPU."""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from provisioner.domain.errors import InputError
from provisioner.domain.gpu_share import WHOLE_GPU_MILLI

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
    gpu_milli: int = WHOLE_GPU_MILLI
    # the job's own time limit, where the trace records one (the controller's jobs table does;
    # the bundled traces do not, and `--estimate limits` draws theirs from the published model)
    time_limit_s: float | None = None

    @property
    def fractional(self) -> bool:
        return self.gpu_milli < WHOLE_GPU_MILLI


def records_limits(jobs: Sequence[TraceJob]) -> bool:
    """Whether the trace has time limits of its own (then none are drawn for it)."""
    return any(j.time_limit_s is not None for j in jobs)


def _open(path: Path) -> io.TextIOBase:
    # utf-8-sig: spreadsheet exports start with a byte-order mark, which would otherwise
    # become part of the first column's name.
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", newline="")
    return path.open(newline="", encoding="utf-8-sig")  # type: ignore[return-value]


def load_trace(path: str | Path, limit: int | None = None) -> list[TraceJob]:
    """Read a trace, sorted by (submit_s, job_id). Errors name the file, line and column."""
    p = Path(path)
    jobs: list[TraceJob] = []
    try:
        with _open(p) as fh:
            reader = csv.DictReader(fh)
            cols = [c.strip() for c in reader.fieldnames or []]
            reader.fieldnames = cols
            missing = [c for c in REQUIRED if c not in cols]
            if missing:
                raise InputError(f"{p}: missing column(s) {', '.join(missing)} in the header")
            for line, row in enumerate(reader, start=2):
                jobs.append(_row(row, p, line))
                if limit is not None and len(jobs) >= limit:
                    break
    except UnicodeDecodeError as exc:
        raise InputError(f"{p}: not UTF-8 text ({exc.reason})") from None
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
            value = float(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise InputError(f"{p}: line {line}: {col}: not a number: {raw!r}") from None
        if not math.isfinite(value):  # a NaN submit time would never come round
            raise InputError(f"{p}: line {line}: {col}: not a finite number: {raw!r}")
        return value

    submit, duration, gpus = num("submit_s"), num("duration_s"), num("gpus")
    if submit < 0:
        raise InputError(f"{p}: line {line}: submit_s: must be >= 0")
    if duration <= 0:
        raise InputError(f"{p}: line {line}: duration_s: must be > 0")
    if gpus < 1 or gpus != int(gpus):
        raise InputError(f"{p}: line {line}: gpus: must be a whole number >= 1")
    return TraceJob(
        gpu_milli=_milli(row.get("gpu_milli"), int(gpus), p, line),
        job_id=row["job_id"],
        submit_s=submit,
        duration_s=duration,
        gpus=int(gpus),
        gpu_type=row.get("gpu_type") or "",
        user=row.get("user") or "",
        group=row.get("group") or "",
    )


def _milli(raw: str | None, gpus: int, p: Path, line: int) -> int:
    if raw is None or not raw.strip():
        return WHOLE_GPU_MILLI
    try:
        milli = int(raw)
    except ValueError:
        raise InputError(f"{p}: line {line}: gpu_milli: not a whole number: {raw!r}") from None
    if not 0 < milli <= WHOLE_GPU_MILLI:
        raise InputError(f"{p}: line {line}: gpu_milli: must be in 1..{WHOLE_GPU_MILLI}")
    if milli < WHOLE_GPU_MILLI and gpus != 1:
        raise InputError(f"{p}: line {line}: gpu_milli: a share of a GPU needs gpus = 1")
    return milli
