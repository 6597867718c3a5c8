"""The built wheel, installed into a clean venv in an empty folder, with no source tree near.

The wheel is built from a copy of the files the build reads (so nothing is written into the
checkout), then installed with the extras the demo and `iac review` need (`aws`, `pulumi`) from
the package sources `make test` already installed from (pip's configured indexes and cache): no
new downloads. Each command then runs from an empty folder, with no PYTHONPATH, and must find its
policies, Pulumi program, bootstrap template, catalog and sample trace inside the installed
package. Expected values come from the source files themselves (read here with csv/yaml), never
from the product.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.wheel

REPO = Path(__file__).resolve().parents[2]
# What the build reads: pyproject.toml and setup.py, the package, and the top-level folders the
# wheel carries as package data.
BUILD_INPUTS = ["pyproject.toml", "setup.py", "README.md", "LICENSE", "provisioner", "policies",
                "infra", "data/traces"]  # fmt: skip
TRACE = REPO / "data" / "traces" / "philly_2017-10-02_4w.csv.gz"


class Installed:
    def __init__(self, venv: Path, cwd: Path) -> None:
        self.venv = venv
        self.cwd = cwd
        self.site = next((venv / "lib").glob("python3*/site-packages"))

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}  # fmt: skip
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        return env

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(a) for a in args], cwd=self.cwd, env=self.env(), capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip

    def provisioner(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.venv / "bin" / "provisioner"), *args, timeout=timeout)

    def python(self, code: str) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.venv / "bin" / "python"), "-c", textwrap.dedent(code))


def _copy_build_inputs(dst: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in BUILD_INPUTS:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=ignore)
        else:
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    src, wheelhouse, venv, empty = (root / n for n in ("src", "wheelhouse", "venv", "empty"))
    _copy_build_inputs(src)
    empty.mkdir()
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheelhouse), str(src)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = wheelhouse.glob("gpu_burst_provisioner-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    inst = Installed(venv, empty)
    pip = inst.run(
        str(venv / "bin" / "pip"), "install", "-q", "--only-binary=:all:",
        f"{wheel}[aws,pulumi]", timeout=900,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    return inst


def test_the_package_is_the_installed_one_not_the_checkout(installed: Installed) -> None:
    res = installed.python("import provisioner; print(provisioner.__file__)")
    assert res.returncode == 0, res.stderr
    where = Path(res.stdout.strip())
    assert where.is_relative_to(installed.site), where
    assert not where.is_relative_to(REPO)


def test_validate_reads_the_policies_shipped_in_the_wheel(installed: Installed) -> None:
    res = installed.provisioner("validate")
    assert res.returncode == 0, res.stderr
    pools = yaml.safe_load((REPO / "policies" / "pools.yaml").read_text())
    count = len(pools["pools"]) if isinstance(pools, dict) and "pools" in pools else len(pools)
    # the shipped policies, named as the package ships them: never this machine's path
    assert res.stdout.startswith("provisioner/_bundled/policies: ok"), res.stdout
    assert str(installed.site) not in res.stdout
    assert f"{count} pools" in res.stdout


def test_simulate_replays_the_sample_trace_shipped_in_the_wheel(installed: Installed) -> None:
    with gzip.open(TRACE, "rt", newline="") as fh:
        jobs = sum(1 for _ in csv.reader(fh)) - 1  # less the header
    out = installed.cwd / "sim.json"
    res = installed.provisioner(
        "simulate", "--policy", "never", "--policy", "immediate", "--no-progress",
        "--json", str(out),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    results = {r["policy"]: r for r in json.loads(out.read_text())}
    assert {r["jobs"] for r in results.values()} == {jobs}
    assert results["never"]["cloud_cost_usd"] == 0
    assert results["immediate"]["cloud_cost_usd"] > 0  # priced from the shipped catalog
    out.unlink()


def test_iac_review_renders_with_the_packaged_program_and_template(installed: Installed) -> None:
    res = installed.provisioner("iac", "review", "--format", "json")
    assert res.returncode in (0, 1), res.stderr[-3000:]  # 1: a policy verdict, still a review
    review = json.loads(res.stdout)
    pools = yaml.safe_load((REPO / "policies" / "pools.yaml").read_text())
    names = {p["name"] for p in (pools["pools"] if isinstance(pools, dict) else pools)}
    assert {p["name"] for p in review["pools"]} == names
    assert all(p["status"] == "added" for p in review["pools"])  # no git here: no base
    types = {r["type"] for p in review["pools"] for r in p["resources"]}
    assert "aws:ec2/launchTemplate:LaunchTemplate" in types
    assert not any("could not be loaded" in n for n in review["notes"])


def test_every_shipped_file_is_found_inside_the_package_with_the_checkout_bytes(
    installed: Installed,
) -> None:
    res = installed.python(
        """
        import json
        from provisioner import data_files
        from provisioner.act.pulumi_driver import load_pool_program
        print(json.dumps({
            "policies/pools.yaml": str(data_files.policies_dir() / "pools.yaml"),
            "policies/demo/pools.yaml": str(data_files.demo_policies_dir() / "pools.yaml"),
            "policies/catalog/gpu_offers.csv": str(data_files.catalog_csv()),
            "policies/policypack/gpu_policies.py": str(data_files.policypack_dir()
                                                       / "gpu_policies.py"),
            "infra/Pulumi.yaml": str(data_files.infra_dir() / "Pulumi.yaml"),
            "infra/bootstrap/slurm-node.cloud-init.yaml": str(data_files.bootstrap_template()),
            "data/traces/philly_2017-10-02_4w.csv.gz": str(data_files.sample_trace()),
            "provisioner/act/pool_program.py": load_pool_program().__code__.co_filename,
        }))
        """
    )
    assert res.returncode == 0, res.stderr[-3000:]
    for source, found in json.loads(res.stdout).items():
        path = Path(found)
        assert path.is_relative_to(installed.site / "provisioner"), (source, path)
        assert path.read_bytes() == (REPO / source).read_bytes(), source


def test_the_demo_runs_from_an_empty_folder(installed: Installed) -> None:
    res = installed.provisioner(
        "demo", "--duration", "8", "--port", "0", "--data-dir", "demo", timeout=240
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    figures = json.loads(res.stdout.strip().splitlines()[-1])
    assert figures["instances"] >= 1 and figures["passes"] >= 1
    assert (installed.cwd / "demo" / "provisioner.sqlite").is_file()
    shutil.rmtree(installed.cwd / "demo")


def test_the_node_agent_samples_gpus_from_the_installed_package(installed: Installed) -> None:
    # No GPU here: the agent runs against the package's own fake NVML seam, in the clean venv.
    res = installed.python(
        """
        import typer
        from typer.testing import CliRunner
        from provisioner.agent.cli import AgentDeps, register
        from provisioner.agent.nvml_fake import FakeGpu, FakeNvml

        nvml = FakeNvml([FakeGpu("GPU-0000", util_gpu=87, mem_used_mib=40960)])
        app = typer.Typer()
        app.callback()(lambda: None)
        register(app, AgentDeps(nvml_factory=lambda: nvml, job_resolver=lambda pid: None,
                                hostname=lambda: "gpu-n1"))
        res = CliRunner().invoke(app, ["agent", "--once"])
        print(res.output)
        raise SystemExit(res.exit_code)
        """
    )
    assert res.returncode == 0, res.stdout + res.stderr
    util = [ln for ln in res.stdout.splitlines() if ln.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    assert len(util) == 1 and util[0].endswith(" 87"), res.stdout
    # The real entry point, without the nvml extra: one clear line naming it, no traceback.
    real = installed.provisioner("agent", "--once")
    assert real.returncode != 0
    assert "pip install 'gpu-burst-provisioner[nvml]'" in real.stderr
    assert "Traceback" not in real.stderr
