"""A real `pulumi preview` per node group, where the CLI and a backend exist.

The base-vs-head diff always comes from rendering both sides under mocks (the base is not
deployed anywhere, so only a render can show it). Where the `pulumi` CLI is installed and a
backend is configured (`--backend` or `PULUMI_BACKEND_URL`), the review also previews every head
node group against its stack in that backend, through the same Automation API driver the
controller uses (`provisioner.act.pulumi_driver`), and reports the engine's change summary per
group (create / update / same / delete). The stacks are injected, so this is tested with a fake;
the CLI path itself has not run on the machines this was written on.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from provisioner.act.ports import PoolSpec
from provisioner.act.pulumi_driver import PulumiPoolDriver, StackFactory


@dataclass
class Rendering:
    """How the review was made, for the report's note."""

    mode: str  # "mocks" | "preview+mocks"
    cli: str | None = None
    backend: str | None = None
    previews: dict[str, dict[str, int]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def note(self) -> str:
        if self.mode == "mocks":
            why = (
                "the Pulumi CLI is not installed"
                if self.cli is None
                else "no Pulumi backend is configured (--backend or PULUMI_BACKEND_URL)"
            )
            return (
                f"Rendered with Pulumi mocks (`pulumi.runtime.set_mocks`) because {why}: the "
                "pool program ran without the engine or providers, so the inputs are exact "
                "but computed outputs (ids, links) are placeholders and nothing was compared "
                "with deployed state."
            )
        return (
            f"Rendered with Pulumi mocks for the base/head diff, and `pulumi preview` "
            f"(CLI {self.cli}, backend {self.backend}) of every head node group against its "
            "deployed stack."
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "cli": self.cli,
            "backend": self.backend,
            "note": self.note,
            "previews": self.previews,
            "preview_errors": self.errors,
        }


def detect(backend: str | None) -> Rendering:
    cli = shutil.which("pulumi")
    if cli is None or not backend:
        return Rendering("mocks", cli=cli, backend=backend or None)
    return Rendering("preview+mocks", cli=cli, backend=backend)


StacksFactory = Callable[[str], StackFactory]


def _automation_stacks(backend: str) -> StackFactory:
    from provisioner.act.pulumi_driver import AutomationStacks

    return AutomationStacks(backend)


def run_previews(
    rendering: Rendering,
    specs: Sequence[PoolSpec],
    program: Callable[[PoolSpec], object],
    *,
    stacks: StacksFactory = _automation_stacks,
) -> Rendering:
    """Fill `rendering.previews` with each group's change summary (errors kept per group)."""
    if rendering.mode != "preview+mocks" or rendering.backend is None:
        return rendering
    driver = PulumiPoolDriver(stacks(rendering.backend), program)
    for spec in specs:
        try:
            summary: Mapping[str, int] = driver.preview(spec)
            rendering.previews[spec.group_name] = {str(k): int(v) for k, v in summary.items()}
        except Exception as exc:  # one group's failure must not hide the others
            rendering.errors[spec.group_name] = str(exc)
    return rendering
