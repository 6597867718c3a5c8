"""The offer catalog: load the pinned CSV into normalised offers."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

from provisioner import data_files
from provisioner.domain.errors import InputError
from provisioner.domain.offers import CapacityType, Offer, OfferKey

REQUIRED_COLUMNS = (
    "cloud",
    "region",
    "instance_type",
    "gpu_model",
    "gpu_count",
    "gpu_mem_gb",
    "vcpus",
    "mem_gb",
    "ondemand_usd_hr",
    "spot_usd_hr",
)


def default_catalog_path() -> Path:
    return data_files.catalog_csv()


@dataclass(frozen=True)
class Catalog:
    offers: tuple[Offer, ...]
    source: str = ""
    _by_model: dict[str, tuple[Offer, ...]] = field(default_factory=dict, compare=False)
    _by_type: dict[tuple[str, str, str], Offer] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        groups: dict[str, list[Offer]] = {}
        for o in self.offers:
            groups.setdefault(o.gpu_model.lower(), []).append(o)
            self._by_type[(o.cloud, o.region, o.instance_type)] = o
        self._by_model.update({k: tuple(v) for k, v in groups.items()})

    @property
    def offers_by_type(self) -> dict[tuple[str, str, str], Offer]:
        """(cloud, region, instance type) -> the offer (the last listed, for a repeated type)."""
        return self._by_type

    def get(self, key: OfferKey) -> Offer | None:
        """The offer behind a key (any capacity type), or None."""
        return self._by_type.get((key.cloud, key.region, key.instance_type))

    def __iter__(self) -> Iterator[Offer]:
        return iter(self.offers)

    def __len__(self) -> int:
        return len(self.offers)

    def for_model(self, gpu_model: str) -> tuple[Offer, ...]:
        return self._by_model.get(gpu_model.lower(), ())


def _dec(value: str, path: str, line: int, column: str) -> Decimal:
    try:
        d = Decimal(value)
    except InvalidOperation:
        raise InputError(f"{path}: line {line}: {column}: not a number: {value!r}") from None
    if d < 0 or not d.is_finite():
        raise InputError(f"{path}: line {line}: {column}: must be a finite amount >= 0")
    return d


def _float(value: str, path: str, line: int, column: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise InputError(f"{path}: line {line}: {column}: not a number: {value!r}") from None


def parse_catalog(rows: Iterable[dict[str, str]], path: str) -> Catalog:
    offers: list[Offer] = []
    for i, row in enumerate(rows, start=2):
        missing = [c for c in REQUIRED_COLUMNS if c not in row or row[c] is None]
        if missing:
            raise InputError(f"{path}: line {i}: missing column(s) {', '.join(missing)}")
        spot = row["spot_usd_hr"].strip()
        risk = (row.get("spot_interruption_pct_max") or "").strip()
        mem = row["gpu_mem_gb"].strip()
        offers.append(
            Offer(
                cloud=row["cloud"].strip(),
                region=row["region"].strip(),
                instance_type=row["instance_type"].strip(),
                gpu_model=row["gpu_model"].strip(),
                gpus_per_node=_float(row["gpu_count"], path, i, "gpu_count"),
                gpu_mem_gb=_float(mem, path, i, "gpu_mem_gb") if mem else None,
                vcpus=int(_float(row["vcpus"] or "0", path, i, "vcpus")),
                mem_gb=_float(row["mem_gb"] or "0", path, i, "mem_gb"),
                ondemand_usd_hr=_dec(row["ondemand_usd_hr"], path, i, "ondemand_usd_hr"),
                spot_usd_hr=_dec(spot, path, i, "spot_usd_hr") if spot else None,
                spot_interruption_pct_max=int(_float(risk, path, i, "spot_interruption_pct_max"))
                if risk
                else None,
            )
        )
    return Catalog(tuple(offers), source=path)


def load_catalog(path: str | Path | None = None) -> Catalog:
    p = Path(path) if path is not None else default_catalog_path()
    try:
        with p.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if reader.fieldnames is None:
                raise InputError(f"{p}: empty file, expected a CSV header")
            return parse_catalog(reader, str(p))
    except OSError as exc:
        raise InputError(f"{p}: cannot read catalog ({exc.strerror})") from None


__all__ = ["CapacityType", "Catalog", "load_catalog", "parse_catalog"]
