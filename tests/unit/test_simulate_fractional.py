"""Fractional jobs in the simulator, on tiny traces worked out by hand.

Cloud: nodes of 8 GPUs at a flat $7 per GPU-hour ($56 an hour a node), billed per second with
no minimum. A MIG GPU holds 7 slices; a share of 470 thousandths needs 4 slices (3.29 rounded up
to the 4g profile), 320 needs 3, 810 needs 7 (5.67: no 6g profile).
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner.cli import app
from provisioner.config.loader import policy_from_mapping
from provisioner.domain.errors import InputError
from provisioner.simulate.engine import SimSettings, flat_catalog, simulate
from provisioner.simulate.trace import TraceJob, load_trace

CAT = flat_catalog(Decimal("7"), "A100", [8])
NODE_USD_S = 56 / 3600
POLICY = policy_from_mapping({"onprem": {"gpu_model": "A100", "gpus_per_node": 8}}, "test")


def frac(job_id: str, at: float, secs: float, milli: int) -> TraceJob:
    return TraceJob(job_id, at, secs, 1, gpu_milli=milli)


def run(jobs, name="immediate", mode="pack", mig=0, onprem=8, boot=0.0):
    settings = SimSettings(
        onprem_gpus=onprem,
        gpus_per_node=8,
        boot_s=boot,
        billing_min_s=0.0,
        fractional=mode,
        mig_gpus=mig,
    )
    return simulate(jobs, settings, POLICY, CAT, name)


def test_packed_shares_fill_one_mig_gpu_on_prem_where_round_up_queues() -> None:
    jobs = [frac("a", 0, 100, 470), frac("b", 0, 100, 320)]
    packed = run(jobs, "never", "pack", mig=1)
    rounded = run(jobs, "never", "round-up", mig=1)
    # 4 + 3 slices fit one GPU at once; a whole GPU each makes b wait for a
    assert packed.avg_jct_s == 100 and packed.max_wait_s == 0
    assert rounded.avg_jct_s == pytest.approx((100 + 200) / 2) and rounded.max_wait_s == 100
    # on-prem use counts the slices held: 7/7 of a GPU for 100 s against 1 GPU for 200 s
    assert packed.onprem_gpu_hours == pytest.approx(100 / 3600)
    assert rounded.onprem_gpu_hours == pytest.approx(200 / 3600)
    assert packed.cloud_cost_usd == rounded.cloud_cost_usd == 0


def test_sixteen_small_shares_need_one_cloud_node_packed_and_two_rounded_up() -> None:
    jobs = [frac(f"j{k:02d}", 0, 150, 320) for k in range(16)]
    packed = run(jobs)
    rounded = run(jobs, mode="round-up")
    # packed: 3 slices each, two to a GPU, 16 on the 8 GPUs of one node
    assert packed.cloud_mig_nodes == 1
    assert float(packed.cloud_cost_usd) == pytest.approx(NODE_USD_S * 150)
    # rounded up: a GPU each, 16 GPUs, two nodes
    assert rounded.cloud_mig_nodes == 2
    assert float(rounded.cloud_cost_usd) == pytest.approx(2 * NODE_USD_S * 150)
    assert packed.burst_fraction == rounded.burst_fraction == 1.0
    assert packed.fractional_jobs == 16 and packed.to_dict()["fractional_mode"] == "pack"


def test_a_later_share_joins_a_running_node_and_a_gone_node_is_not_reused() -> None:
    jobs = [frac("a", 0, 100, 810), frac("b", 120, 100, 810), frac("c", 300, 150, 810)]
    r = run(jobs, boot=50)
    # a: node requested at 0, ready at 50, a ends 150; b at 120 joins it (free slices, the
    # node is up) and keeps it to 220; c at 300 finds it gone: a new node, 300 to 500
    assert r.cloud_mig_nodes == 2
    assert float(r.cloud_cost_usd) == pytest.approx(NODE_USD_S * (220 + 200))
    assert r.avg_wait_s == pytest.approx((50 + 0 + 50) / 3)
    assert r.avg_jct_s == pytest.approx((150 + 100 + 200) / 3)


def test_default_keeps_a_share_on_prem_when_a_slice_frees_before_a_node_boots() -> None:
    jobs = [frac("a", 0, 1000, 810), frac("b", 10, 500, 810)]
    r = run(jobs, "default", mig=1, boot=3000)
    # b: its GPU frees at 1000, before a node booted at 10 + 3000 would be ready
    assert r.cloud_cost_usd == 0
    assert r.max_wait_s == 990


def test_whole_jobs_keep_the_gpus_outside_the_mig_layout() -> None:
    jobs = [TraceJob("w", 0, 100, 8), frac("a", 0, 100, 470)]
    with pytest.raises(
        InputError, match=r"more than the 7 on-prem GPUs \(1 more are MIG-partitioned\)"
    ):
        run(jobs, "never", mig=1)
    r = run([TraceJob("w", 0, 100, 7), frac("a", 0, 100, 470)], "never", mig=1)
    assert r.max_wait_s == 0 and r.mig_gpus == 1


def test_never_needs_mig_gpus_for_a_share() -> None:
    with pytest.raises(InputError, match="no MIG GPUs on-prem"):
        run([frac("a", 0, 100, 470)], "never", mig=0)


def test_the_mig_layout_defaults_to_the_shares_part_of_gpu_time() -> None:
    jobs = [TraceJob("w", 0, 300, 2), frac("a", 0, 200, 470)]
    settings = SimSettings(onprem_gpus=16, gpus_per_node=8, boot_s=0.0, billing_min_s=0.0)
    r = simulate(jobs, settings, POLICY, CAT, "never")
    # the share's GPU time, as a whole GPU: 200 of 600 + 200 GPU-s, a quarter of 16 GPUs
    assert r.mig_gpus == 4


def test_trace_reads_gpu_milli_and_names_bad_values(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text(
        "job_id,submit_s,duration_s,gpus,gpu_milli\na,0,10,1,470\nb,1,10,2,\nc,2,10,1,1000\n"
    )
    jobs = load_trace(p)
    assert [j.gpu_milli for j in jobs] == [470, 1000, 1000]
    assert [j.fractional for j in jobs] == [True, False, False]
    for row, why in (
        ("a,0,10,1,1500", "gpu_milli: must be in 1..1000"),
        ("a,0,10,2,500", "gpu_milli: a share of a GPU needs gpus = 1"),
        ("a,0,10,1,0.5", "gpu_milli: not a whole number"),
    ):
        p.write_text("job_id,submit_s,duration_s,gpus,gpu_milli\n" + row + "\n")
        with pytest.raises(InputError, match=f"t.csv: line 2: {why}"):
            load_trace(p)


def test_cli_packs_by_default_and_rounds_up_on_request(tmp_path: Path) -> None:
    trace = tmp_path / "f.csv.gz"
    rows = "".join(f"j{k:02d},0,150,1,320\n" for k in range(16))
    trace.write_bytes(
        gzip.compress(("job_id,submit_s,duration_s,gpus,gpu_milli\n" + rows).encode())
    )
    out = {}
    for mode in ("pack", "round-up"):
        js = tmp_path / f"{mode}.json"
        res = CliRunner().invoke(
            app,
            [
                "simulate",
                "--trace",
                str(trace),
                "--onprem-gpus",
                "8",
                "--mig-gpus",
                "0",
                "--price-per-gpu-hour",
                "7",
                "--cloud-node-gpus",
                "8",
                "--boot-seconds",
                "0",
                "--policy",
                "immediate",
                "--fractional",
                mode,
                "--no-progress",
                "--json",
                str(js),
            ],
        )
        assert res.exit_code == 0, res.output
        out[mode] = json.loads(js.read_text())[0]
    assert out["pack"]["cloud_cost_usd"] == pytest.approx(round(NODE_USD_S * 150, 2))
    assert out["round-up"]["cloud_cost_usd"] == pytest.approx(round(2 * NODE_USD_S * 150, 2))
    assert out["pack"]["cloud_mig_nodes"] == 1 and out["round-up"]["mig_gpus"] == 0
    bad = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--fractional", "half"])
    assert bad.exit_code == 2 and "--fractional: must be pack or round-up" in bad.output
