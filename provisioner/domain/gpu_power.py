"""Board power per GPU model: the most a GPU of that model can draw, from its datasheet.

Telemetry is bounded by it (a sample claiming more is refused) and so is billed energy (no
window holds more than power x time). Models are matched by name the way Slurm, NVML and the
catalog write them: "a100", "NVIDIA A100-SXM4-80GB" and "A100" are one model. The longest known
name that starts the normalised name wins, so "l40s" is an L40S and not an L40.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

_PREFIXES = ("nvidia", "tesla", "geforce", "amd", "radeonpro")


def normalise_model(name: str) -> str:
    """Lower case, letters and digits only, vendor words dropped: "NVIDIA A100-SXM4" -> a100sxm4."""
    out = re.sub(r"[^a-z0-9]", "", name.lower())
    changed = True
    while changed:
        changed = False
        for p in _PREFIXES:
            if out.startswith(p):
                out, changed = out[len(p) :], True
    return out


@dataclass(frozen=True)
class BoardPower:
    """Watts per GPU model (keys as the table writes them)."""

    watts: Mapping[str, float] = field(default_factory=dict)

    def of(self, model: str) -> float | None:
        """The board power of `model`, None when no known model names it."""
        key = normalise_model(model)
        if not key:
            return None
        best: tuple[int, float] | None = None
        for name, w in self.watts.items():
            n = normalise_model(name)
            if n and key.startswith(n) and (best is None or len(n) > best[0]):
                best = (len(n), w)
        return best[1] if best is not None else None


def gpu_power_bound_w(
    board: BoardPower, model: str, site_max_w: float, reported_limit_w: float | None = None
) -> float:
    """The most one GPU of `model` may be believed to draw: its board power (the site's bound
    when the model is unknown), lowered, never raised, by the limit its agent reports."""
    bound = min(site_max_w, board.of(model) or site_max_w)
    if reported_limit_w is not None and 0 < reported_limit_w < bound:
        return reported_limit_w
    return bound


__all__ = ["BoardPower", "gpu_power_bound_w", "normalise_model"]
