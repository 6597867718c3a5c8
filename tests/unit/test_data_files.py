"""`provisioner.data_files`: the one place that knows where shipped files are."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from provisioner import data_files
from provisioner.domain.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_a_checkout_reads_the_top_level_folders() -> None:
    assert data_files.policies_dir() == REPO / "policies"
    assert data_files.catalog_csv() == REPO / "policies" / "catalog" / "gpu_offers.csv"
    assert data_files.bootstrap_template() == (
        REPO / "infra" / "bootstrap" / "slurm-node.cloud-init.yaml"
    )
    assert data_files.sample_trace() == REPO / "data" / "traces" / "philly_2017-10-02_4w.csv.gz"
    pack = data_files.policypack_dir() / "gpu_policies.py"
    for path in (data_files.catalog_csv(), data_files.bootstrap_template(), pack):
        assert path.is_file(), path


def test_no_shipped_folder_anywhere_is_an_error_naming_both_places(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(data_files, "_SOURCE", {"infra": str(tmp_path / "gone")})
    with pytest.raises(ConfigError) as err:
        data_files.infra_dir()
    assert "_bundled/infra" in str(err.value) and str(tmp_path / "gone") in str(err.value)


def test_no_other_module_finds_files_from_its_own_path() -> None:
    # `Path(__file__).parents[N]` breaks in an installed wheel: data_files is the one place.
    climb = re.compile(r"__file__\)?(\.resolve\(\))?\.parents\[")
    offenders = [
        str(p.relative_to(REPO))
        for p in (REPO / "provisioner").rglob("*.py")
        if p.name != "data_files.py" and climb.search(p.read_text())
    ]
    assert offenders == []
