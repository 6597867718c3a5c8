"""Where the files the package ships are: policies, the Pulumi project, the sample trace.

They live once in git, at the repository's top level (`policies/`, `infra/`, `data/traces/`).
The wheel carries them as package data under `provisioner/_bundled/` (`setup.py` maps them
there at build time), so an installed package finds them through `importlib.resources`; a source
checkout (or an editable install) has no `_bundled/` and reads the top-level folders instead.
Every other module asks here, so no code computes a path from its own file.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from provisioner.domain.errors import ConfigError

# name in the wheel (under provisioner/_bundled/) -> folder in the source tree
_SOURCE = {"policies": "policies", "infra": "infra", "traces": "data/traces"}
SAMPLE_TRACE = "philly_2017-10-02_4w.csv.gz"
BOOTSTRAP_TEMPLATE = Path("bootstrap") / "slurm-node.cloud-init.yaml"
BOOTSTRAP_JOIN = Path("bootstrap") / "gpu-burst-join.py"
BOOTSTRAP_WATCH = Path("bootstrap") / "gpu-burst-watch.py"


def _shipped(name: str) -> Path:
    # Wheels install unpacked, so the bundled folder is a real directory on disk.
    bundled = Path(str(files("provisioner") / "_bundled" / name))
    if bundled.is_dir():
        return bundled
    source = Path(__file__).resolve().parents[1] / _SOURCE[name]
    if source.is_dir():
        return source
    raise ConfigError(
        str(bundled), name, f"not shipped with this package, and no source tree at {source}"
    )


def policies_dir() -> Path:
    """The default policies (burst.yaml, pools.yaml, budgets.yaml)."""
    return _shipped("policies")


def demo_policies_dir() -> Path:
    """The demo's policies (its pools on the stand-in clouds)."""
    return policies_dir() / "demo"


def catalog_csv() -> Path:
    """The GPU offer catalog (data/prices derived; see policies/catalog/README.md)."""
    return policies_dir() / "catalog" / "gpu_offers.csv"


def board_power_csv() -> Path:
    """Board power per GPU model, cited to the vendors' datasheets (see policies/catalog)."""
    return policies_dir() / "catalog" / "gpu_board_power.csv"


def policypack_dir() -> Path:
    """The CrossGuard policy pack that judges IaC reviews."""
    return policies_dir() / "policypack"


def infra_dir() -> Path:
    """The Pulumi project (Pulumi.yaml, its program's entry, the node bootstrap template)."""
    return _shipped("infra")


def bootstrap_template() -> Path:
    """The cloud-init template every burst node boots with."""
    return infra_dir() / BOOTSTRAP_TEMPLATE


def bootstrap_join_program() -> Path:
    """The program a burst node runs at first boot to join as the node it was bound to."""
    return infra_dir() / BOOTSTRAP_JOIN


def bootstrap_watch_program() -> Path:
    """The program that reports a burst node's spot warnings to the controller."""
    return infra_dir() / BOOTSTRAP_WATCH


def cloud_init_schema() -> Path:
    """cloud-init's JSON schema for #cloud-config, vendored with its licence (package data of
    provisioner.act, in the wheel and in the source tree alike)."""
    return (
        Path(str(files("provisioner") / "act" / "cloud_init_schema"))
        / "schema-cloud-config-v1.json"
    )


def sample_trace() -> Path:
    """Four weeks of Microsoft Philly GPU jobs (data/traces/README.md), for the demo and
    `provisioner simulate`."""
    return _shipped("traces") / SAMPLE_TRACE
