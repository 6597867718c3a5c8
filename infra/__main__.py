"""`pulumi preview` by hand: every node group the policy allows, declared by `build_pool`.

Config (see Pulumi.yaml): `policies`, `pools`, `awsImage`, `gcpImage`, `gcpProject`,
`controllerHost`. The controller itself runs one stack per node group through the Automation API
(provisioner.act.pulumi_driver); this program is for reviews and manual previews.
"""

from __future__ import annotations

from pathlib import Path

import pulumi

from provisioner.act.pool_program import build_pool
from provisioner.act.specs import NodeImages, pool_specs
from provisioner.act.userdata import NodeBootstrap, render_user_data
from provisioner.config.loader import load_policy
from provisioner.plan.catalog import load_catalog

cfg = pulumi.Config()
policy = load_policy(Path(cfg.get("policies") or "../policies"))
boot = NodeBootstrap(controller_host=cfg.get("controllerHost") or "slurmctld.internal")
images = NodeImages(
    {
        "aws": cfg.get("awsImage") or "ami-0123456789abcdef0",
        "gcp": cfg.get("gcpImage")
        or "projects/deeplearning-platform-release/global/images/family/common-cu124",
    }
)
only = [p for p in (cfg.get("pools") or "").split(",") if p]
specs = pool_specs(
    policy,
    load_catalog(),
    images=images,
    user_data=lambda s: render_user_data(s, boot),
    project=cfg.get("gcpProject") or "",
    pools=only,
)
groups = [build_pool(spec) for spec in specs]
