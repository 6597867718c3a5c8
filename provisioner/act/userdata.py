"""Render the node bootstrap (cloud-init user-data) that joins a burst VM to Slurm.

The document is data: the template (`infra/bootstrap/slurm-node.cloud-init.yaml`, package data
in a wheel) is loaded as YAML, the node group's settings and the join program are added to its
`write_files`, and the result is dumped with `yaml.safe_dump`, never filled in as text. Every
rendering is checked against cloud-init's own JSON schema (vendored from Debian 12's
cloud-init, `cloud_init_schema/`), so a bad document fails here, naming the field, not on a VM.
The Pulumi programs and the SDK drivers send the same bytes.
"""

from __future__ import annotations

import base64
import gzip
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from provisioner import data_files
from provisioner.act.ports import NODE_KEY, PoolSpec
from provisioner.config.models import NodeBootstrap as NodeBootstrapPolicy
from provisioner.domain.errors import InvalidArgument
from provisioner.domain.gpu_share import mig_profile_of

HEADER = "#cloud-config\n"
NODE_SETTINGS = "/etc/gpu-burst/node.json"
JOIN_PROGRAM = "/usr/local/sbin/gpu-burst-join"
WATCH_PROGRAM = "/usr/local/sbin/gpu-burst-watch"
# AWS refuses user-data over 16 KB (before base64): https://docs.aws.amazon.com/AWSEC2/latest/
# UserGuide/user-data.html. GCE's limit on a metadata value (256 KB) is far above it.
MAX_USER_DATA_BYTES = 16 * 1024
SECRET_MANAGER = "https://secretmanager.googleapis.com"
# What the GPU agent (provisioner.agent) imports beyond the standard library: the VM installs
# these, not the controller's dependencies (`make agent-wheels` collects them; a test holds
# them to pyproject.toml).
AGENT_PACKAGE = "gpu-burst-provisioner"
AGENT_REQUIREMENTS = ("typer>=0.12", "httpx>=0.27", "tenacity>=8.2")


def default_template_path() -> Path:
    return data_files.bootstrap_template()


@dataclass(frozen=True, slots=True)
class NodeBootstrap:
    controller_host: str
    controller_port: int = 6817
    # Prints the cluster's munge key on the VM; "" when the image already holds the key.
    munge_key_command: str = ""
    munge_key_parameter: str = ""  # AWS: SSM parameter read with the instance's role
    ssm_endpoint: str = ""  # "" = the region's public SSM endpoint
    munge_key_secret: str = ""  # GCP: Secret Manager secret read with the service account
    secretmanager_endpoint: str = ""  # "" = Google's public Secret Manager endpoint
    join_deadline_s: int = 600  # how long the VM waits to be named before it gives up
    controller_api: str = ""  # where the spot watcher reports; "" runs none
    agent_wheels: str = ""  # where the VM installs the GPU agent from; "" installs none
    agent_interval_s: float = 15.0
    template_path: Path | None = None


def bootstrap_from(node: NodeBootstrapPolicy, template_path: Path | None = None) -> NodeBootstrap:
    """The bootstrap a policy's `node` section asks for."""
    return NodeBootstrap(
        controller_host=node.controller_host,
        controller_port=node.controller_port,
        munge_key_command=node.munge_key_command,
        munge_key_parameter=node.munge_key_parameter,
        ssm_endpoint=node.ssm_endpoint,
        munge_key_secret=node.munge_key_secret,
        secretmanager_endpoint=node.secretmanager_endpoint,
        join_deadline_s=node.join_deadline_s,
        controller_api=node.controller_api,
        agent_wheels=node.agent_wheels,
        agent_interval_s=node.agent_interval_s,
        template_path=template_path,
    )


def munge_key_source(spec: PoolSpec, boot: NodeBootstrap) -> dict[str, str]:
    """Where the VM reads its munge key with its own identity (nothing secret: a name)."""
    if spec.cloud == "aws" and boot.munge_key_parameter:
        endpoint = boot.ssm_endpoint or f"https://ssm.{spec.region}.amazonaws.com"
        return {
            "source": "ssm",
            "name": boot.munge_key_parameter,
            "region": spec.region,
            "endpoint": endpoint,
        }
    if spec.cloud == "gcp" and boot.munge_key_secret:
        secret = boot.munge_key_secret
        if not secret.startswith("projects/"):
            if not spec.project:
                raise InvalidArgument(
                    f"pool {spec.pool}: node.munge_key_secret {secret!r} names no project, and "
                    "the pool has none: write projects/<project>/secrets/<secret>"
                )
            secret = f"projects/{spec.project}/secrets/{secret}"
        return {
            "source": "gcp-secret",
            "name": f"{secret}/versions/latest",
            "endpoint": boot.secretmanager_endpoint or SECRET_MANAGER,
        }
    return {}


def node_settings(spec: PoolSpec, boot: NodeBootstrap) -> dict[str, Any]:
    """What the join program reads on the VM (/etc/gpu-burst/node.json). Nothing secret."""
    return {
        "cloud": spec.cloud,
        "conf_server": f"{boot.controller_host}:{boot.controller_port}",
        "node_key": NODE_KEY,
        "join_deadline_s": boot.join_deadline_s,
        "munge_key_command": boot.munge_key_command,
        "munge_key": munge_key_source(spec, boot),
        "controller": spec.controller,
        "pool": spec.pool,
        "group": spec.group_name,
        "decision": spec.decision_id,
        "controller_api": boot.controller_api,
        "agent": agent_install(boot),
        "mig": mig_settings(spec),
    }


def mig_settings(spec: PoolSpec) -> dict[str, Any]:
    """The MIG layout the join program sets on every GPU before slurmd starts ({}: none):
    nvidia-smi takes the profile's own name, whatever the pool calls its GRES type."""
    profile = mig_profile_of(spec.mig_profile) if spec.mig_profile else None
    if profile is None:
        return {}
    return {"profile": profile.name, "per_gpu": spec.mig_per_gpu, "gpus": spec.gpus}


def agent_install(boot: NodeBootstrap) -> dict[str, Any]:
    """How the VM installs and runs the GPU agent ({} for none): this project's wheel without
    its dependencies (the controller's), then the agent's own, all from `agent_wheels`."""
    if not boot.agent_wheels or not boot.controller_api:
        return {}
    return {
        "wheels": boot.agent_wheels,
        "package": AGENT_PACKAGE,
        "requirements": list(AGENT_REQUIREMENTS),
        "interval_s": boot.agent_interval_s,
    }


def bootstrap_document(spec: PoolSpec, boot: NodeBootstrap) -> dict[str, Any]:
    path = boot.template_path or default_template_path()
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict):
        raise InvalidArgument(f"{path}: a cloud-config template must be a mapping")
    settings = json.dumps(node_settings(spec, boot), indent=2, sort_keys=True) + "\n"
    programs = [(JOIN_PROGRAM, data_files.bootstrap_join_program())]
    if boot.controller_api:
        programs.append((WATCH_PROGRAM, data_files.bootstrap_watch_program()))
    doc["write_files"] = [
        {"path": NODE_SETTINGS, "permissions": "0644", "content": settings},
        *(program_file(at, source) for at, source in programs),
        *doc.get("write_files", []),
    ]
    return doc


def program_file(at: str, source: Path) -> dict[str, str]:
    """A shipped program as a cloud-init file, gzipped (AWS's 16 KB user-data limit; the
    programs are read in the repository, infra/bootstrap/). `mtime=0`: the same program
    gives the same bytes, so a rendering changes only when the program does."""
    packed = gzip.compress(source.read_bytes(), mtime=0)
    return {
        "path": at,
        "permissions": "0755",
        "encoding": "gz+b64",
        "content": base64.b64encode(packed).decode(),
    }


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the settings, the join program) as literal blocks, so the document
    reads as written in an IaC review."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render_user_data(spec: PoolSpec, boot: NodeBootstrap) -> str:
    doc = bootstrap_document(spec, boot)
    text = HEADER + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=4096)
    check_user_data(text)
    size = len(text.encode())
    if size > MAX_USER_DATA_BYTES:
        raise InvalidArgument(
            f"user-data for pool {spec.pool}: {size} bytes, over the {MAX_USER_DATA_BYTES} "
            "bytes AWS accepts (a smaller munge_key_command or template)"
        )
    if yaml.safe_load(text) != doc:  # what the VM reads is what was built
        raise InvalidArgument("user-data: the dumped document does not read back as built")
    return text


@cache
def _validator() -> Any:
    """cloud-init's schema, read and compiled once (every rendering is checked against it)."""
    raw = data_files.cloud_init_schema().read_text(encoding="utf-8")
    return jsonschema.Draft4Validator(json.loads(raw))


def check_user_data(text: str, where: str = "user-data") -> None:
    """Refuse a user-data that cloud-init would not accept: not `#cloud-config`, not YAML, or
    against cloud-init's schema (the error names the field)."""
    if not text.startswith(HEADER):
        raise InvalidArgument(f"{where}: must start with {HEADER.strip()!r}")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidArgument(f"{where}: not YAML: {exc}") from exc
    errors = sorted(_validator().iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        first = errors[0]
        field = ".".join(str(p) for p in first.path) or "(top)"
        raise InvalidArgument(f"{where}: {field}: {first.message}")
