"""Which Slurm the observer talks to: its release and the data_parser (OpenAPI) version that
release speaks, found once when the observer starts.

Slurm changed its JSON between releases (see docs/slurm.md): 22.05 prints v0.0.38 shapes, 23.02
to 24.11 print the data_parser shapes v0.0.39 to v0.0.42. A release outside that range is refused
with a message that says which ones are read, instead of failing later on an odd field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from provisioner.command_runner import CommandRunner, run_observed
from provisioner.domain.errors import ProvisionerError, SnapshotError

# release series -> the newest data_parser / slurmrestd API version it serves
DATA_PARSERS: dict[tuple[int, int], str] = {
    (22, 5): "v0.0.38",
    (23, 2): "v0.0.39",
    (23, 11): "v0.0.40",
    (24, 5): "v0.0.41",
    (24, 11): "v0.0.42",
}
# run for real in `make test` (the others are read from recorded shapes only)
TESTED_LIVE: frozenset[tuple[int, int]] = frozenset({(22, 5), (24, 11)})

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


class UnsupportedSlurmVersion(ProvisionerError):
    """The Slurm release is outside what the observer reads."""


@dataclass(frozen=True, slots=True, order=True)
class SlurmVersion:
    major: int
    minor: int
    micro: int = 0

    @property
    def series(self) -> str:
        return f"{self.major:02d}.{self.minor:02d}"

    def __str__(self) -> str:
        return f"{self.series}.{self.micro}"

    @property
    def data_parser(self) -> str:
        """The data_parser / slurmrestd API version this release speaks."""
        return supported(self)

    @property
    def squeue_json_filters(self) -> bool:
        """From 23.02 on, `squeue --json` applies squeue's default state filter, so finished
        jobs (kept for MinJobAge) are missing unless `--states=all` is given; 22.05 printed
        every job."""
        return (self.major, self.minor) >= (23, 2)

    @property
    def has_scontrol_json(self) -> bool:
        """`scontrol show nodes --json` exists from 23.02 on (22.05 has no --json there)."""
        return (self.major, self.minor) >= (23, 2)


def supported_text() -> str:
    series = ", ".join(f"{a:02d}.{b:02d}" for a, b in sorted(DATA_PARSERS))
    parsers = sorted(DATA_PARSERS.values())
    return f"Slurm {series} (data_parser {parsers[0]} to {parsers[-1]})"


def supported(version: SlurmVersion) -> str:
    """The data_parser of a supported release; UnsupportedSlurmVersion otherwise."""
    parser = DATA_PARSERS.get((version.major, version.minor))
    if parser is None:
        raise UnsupportedSlurmVersion(
            f"Slurm {version} is not supported: the observer reads {supported_text()}; "
            "see docs/slurm.md"
        )
    return parser


def parse_version(text: str, *, source: str = "slurm version") -> SlurmVersion:
    """`slurm 24.11.5`, `slurm-wlm 22.05.8`, `24.11.5` → SlurmVersion. SnapshotError when
    no version is in the text."""
    m = _VERSION.search(text or "")
    if not m:
        raise SnapshotError(f"{source}: no Slurm version in {text.strip()[:80]!r}")
    return SlurmVersion(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))


def detect_version(
    runner: CommandRunner, *, sinfo: str = "sinfo", timeout_s: float = 15.0
) -> SlurmVersion:
    """The release of the Slurm commands the runner reaches (`sinfo --version`), checked to be
    supported. SnapshotError when the command cannot run; UnsupportedSlurmVersion when the
    release is outside the supported range."""
    res = run_observed(runner, [sinfo, "--version"], timeout_s=timeout_s)
    if not res.ok:
        raise SnapshotError(res.describe())
    version = parse_version(res.stdout, source=f"{sinfo} --version")
    supported(version)
    return version
