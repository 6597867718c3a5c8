from __future__ import annotations

from pathlib import Path

import pytest
from iac_helpers import AWS_POOL, GCP_POOL, commit_all, init_repo, write_policies

from provisioner.plan.catalog import load_catalog


@pytest.fixture(scope="session")
def catalog():
    return load_catalog()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repo whose HEAD holds policies/ with the AWS and GCP pools."""
    root = init_repo(tmp_path / "repo")
    write_policies(root / "policies", [AWS_POOL, GCP_POOL])
    commit_all(root, "pools")
    return root
