"""Load the board power table shipped with the catalog (policies/catalog/gpu_board_power.csv)."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from provisioner import data_files
from provisioner.domain.errors import InputError
from provisioner.domain.gpu_power import BoardPower, gpu_power_bound_w
from provisioner.domain.nodes import Node


def load_board_power(path: str | Path | None = None) -> BoardPower:
    """Read the table; a row without a model or a positive wattage is an error naming the row."""
    p = Path(path) if path is not None else data_files.board_power_csv()
    watts: dict[str, float] = {}
    with p.open(newline="") as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            model = (row.get("gpu_model") or "").strip()
            try:
                w = float(row.get("board_power_w") or "")
            except ValueError:
                w = 0.0
            if not model or not 0 < w <= 100_000:
                raise InputError(f"{p}:{line}: a gpu_model and a board_power_w in (0, 1e5] W")
            watts[model] = w
    return BoardPower(watts)


@cache
def shipped_board_power() -> BoardPower:
    return load_board_power()


def node_power_bounds(
    nodes: Iterable[Node], site_max_w: float, board: BoardPower | None = None
) -> dict[str, float]:
    """The most one GPU of each node may draw (W), from its Slurm GPU type."""
    table = board or shipped_board_power()
    return {n.name: gpu_power_bound_w(table, n.gpu_type, site_max_w) for n in nodes}


__all__ = ["load_board_power", "node_power_bounds", "shipped_board_power"]
