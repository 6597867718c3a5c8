"""Render the node bootstrap (cloud-init) that starts slurmd pointed at the controller.

The template lives in `infra/bootstrap/slurm-node.cloud-init.yaml` (package data in a wheel), so
the Pulumi programs and the SDK drivers send the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from string import Template

from provisioner import data_files
from provisioner.act.ports import PoolSpec


def default_template_path() -> Path:
    return data_files.bootstrap_template()


@dataclass(frozen=True, slots=True)
class NodeBootstrap:
    controller_host: str
    controller_port: int = 6817
    # Burst nodes get a higher Weight than on-prem nodes so local GPUs are used first.
    weight: int = 100
    # Prints the cluster's munge key (e.g. from AWS SSM or GCP Secret Manager).
    munge_key_command: str = "cat /run/secrets/munge.key"
    template_path: Path | None = None


def node_features(spec: PoolSpec) -> str:
    cap = "spot" if spec.spot else "on-demand"
    gpu = spec.gpu_model.lower().replace(" ", "-")
    return ",".join(("cloud", spec.cloud, spec.region, cap, spec.pool, gpu))


def render_user_data(spec: PoolSpec, boot: NodeBootstrap) -> str:
    path = boot.template_path or default_template_path()
    tmpl = Template(path.read_text(encoding="utf-8"))
    return tmpl.substitute(
        controller_host=boot.controller_host,
        controller_port=boot.controller_port,
        features=node_features(spec),
        gpus=spec.gpus,
        weight=boot.weight,
        controller=spec.controller,
        pool=spec.pool,
        group=spec.group_name,
        decision=spec.decision_id,
        munge_key_command=boot.munge_key_command,
    )
