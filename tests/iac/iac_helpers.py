"""Builders for the IaC review tests: policy directories and small git repositories."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

AWS_POOL: dict[str, Any] = {
    "name": "aws-a100",
    "cloud": "aws",
    "regions": ["us-east-1"],
    "gpu_model": "A100",
    "instance_types": ["p4d.24xlarge"],
    "capacity": "spot",
    "max_nodes": 4,
    "team": "vision",
}
GCP_POOL: dict[str, Any] = {
    "name": "gcp-a100",
    "cloud": "gcp",
    "regions": ["us-central1"],
    "gpu_model": "A100",
    "instance_types": ["a2-highgpu-1g"],
    "capacity": "any",
    "max_nodes": 2,
}
NODE = {"images": {"aws": "ami-0abc", "gcp": "projects/p/global/images/gpu"}}


def pool(base: dict[str, Any], **over: Any) -> dict[str, Any]:
    return {**base, **over}


def write_policies(
    directory: Path,
    pools: list[dict[str, Any]] | None,
    *,
    node: dict[str, Any] | None = None,
    controller: str | None = "burst-ctl",
) -> Path:
    """A policies/ directory: burst.yaml (controller, node images) and pools.yaml.

    `pools=None` writes no pools.yaml (a policy without pools); `controller=None` names none
    (the installation's stored identity is used)."""
    directory.mkdir(parents=True, exist_ok=True)
    burst: dict[str, Any] = {"node": NODE if node is None else node}
    if controller is not None:
        burst["controller"] = controller
    (directory / "burst.yaml").write_text(yaml.safe_dump(burst), encoding="utf-8")
    target = directory / "pools.yaml"
    if pools is None:
        target.unlink(missing_ok=True)
    else:
        target.write_text(yaml.safe_dump({"pools": pools}, sort_keys=False), encoding="utf-8")
    return directory


def git(repo: Path, *args: str) -> str:
    res = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return res.stdout.strip()


def init_repo(repo: Path) -> Path:
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("pools under review\n", encoding="utf-8")
    git(repo, "add", "README.md")
    git(repo, "commit", "-q", "-m", "empty")
    return repo


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")
