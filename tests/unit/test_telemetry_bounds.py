"""Issue 30: telemetry held to the hardware Slurm and the catalog know. Board powers are the
datasheet figures in policies/catalog/gpu_board_power.csv, written out here by hand."""

from __future__ import annotations

import pytest

from provisioner.domain.errors import InputError
from provisioner.domain.gpu_power import BoardPower, gpu_power_bound_w, normalise_model
from provisioner.domain.telemetry import GpuTelemetry
from provisioner.domain.telemetry_bounds import (
    NodeHardware,
    drop_foreign_job_tags,
    hardware_refusal,
)
from provisioner.plan.board_power import load_board_power, shipped_board_power

T0 = 1_768_046_400.0
SITE_MAX_W = 5000.0


def sample(gpus: list[dict[str, object]], **kw: object) -> GpuTelemetry:
    return GpuTelemetry.model_validate({"node": "gpu-1", "sampled_ts": T0, "gpus": gpus, **kw})


A100_NODE = NodeHardware("gpu-1", 8, "a100")


@pytest.mark.parametrize(
    ("model", "watts"),
    [
        ("a100", 400.0),
        ("NVIDIA A100-SXM4-80GB", 400.0),
        ("A100", 400.0),
        ("h100", 700.0),
        ("NVIDIA H100 80GB HBM3", 700.0),
        ("Tesla V100-SXM2-16GB", 300.0),
        ("l40s", 350.0),  # not the L40's 300 W: the longest name wins
        ("L40", 300.0),
        ("NVIDIA L4", 72.0),
        ("t4", 70.0),
        ("NVIDIA A10G", 300.0),
        ("RTX Pro 6000", 600.0),
    ],
)
def test_the_shipped_table_knows_each_catalog_model_by_any_of_its_names(model, watts):
    assert shipped_board_power().of(model) == watts


def test_an_unknown_model_has_no_board_power_and_the_site_bound_applies():
    board = shipped_board_power()
    assert board.of("1g.10gb") is None and board.of("") is None
    assert gpu_power_bound_w(board, "mystery", SITE_MAX_W) == SITE_MAX_W
    assert normalise_model("NVIDIA Tesla T4") == "t4"


def test_every_catalog_gpu_model_has_a_board_power():
    import csv

    from provisioner.data_files import catalog_csv

    with catalog_csv().open(newline="") as f:
        models = {row["gpu_model"] for row in csv.DictReader(f)}
    board = shipped_board_power()
    assert sorted(m for m in models if board.of(m) is None) == []


def test_an_agents_limit_lowers_the_bound_and_never_raises_it():
    board = BoardPower({"A100": 400.0})
    assert gpu_power_bound_w(board, "a100", SITE_MAX_W, 250.0) == 250.0
    assert gpu_power_bound_w(board, "a100", SITE_MAX_W, 4999.0) == 400.0
    assert gpu_power_bound_w(board, "a100", 300.0) == 300.0  # the site's bound is lower


def test_a_bad_table_row_is_named(tmp_path):
    p = tmp_path / "power.csv"
    p.write_text("gpu_model,board_power_w\nA100,400\nH100,lots\n")
    with pytest.raises(InputError, match=r"power\.csv:3"):
        load_board_power(p)


def test_a_sample_within_the_hardware_stands():
    gpus = [{"index": i, "power_w": 399.0} for i in range(8)]
    assert hardware_refusal(sample(gpus), A100_NODE, shipped_board_power(), SITE_MAX_W) is None


@pytest.mark.parametrize(
    ("gpus", "hw", "rule", "loc"),
    [
        # the probe's 64 GPUs with indexes 8-71 on a node with 8
        ([{"index": i} for i in range(8, 72)], A100_NODE, "gpu_count", ("gpus",)),
        ([{"index": 9}], A100_NODE, "gpu_index", ("gpus", 0, "index")),
        ([{"index": 0, "power_w": 4999.0}], A100_NODE, "board_power", ("gpus", 0, "power_w")),
        (
            [{"index": 0}, {"index": 1, "power_w": 260.0, "power_limit_w": 250.0}],
            A100_NODE,
            "board_power",
            ("gpus", 1, "power_w"),
        ),
        ([{"index": 0}], None, "unknown_node", ("node",)),
        ([{"index": 0}], NodeHardware("gpu-1", 0, ""), "gpu_count", ("gpus",)),
    ],
)
def test_each_rule_refuses_and_names_itself(gpus, hw, rule, loc):
    r = hardware_refusal(sample(gpus), hw, shipped_board_power(), SITE_MAX_W)
    assert r is not None and (r.rule, r.loc) == (rule, loc)


def test_a_burst_node_is_bounded_by_its_instance_type():
    hw = NodeHardware("aws-g6-1", 1, "L4", source="instance")
    r = hardware_refusal(
        sample([{"index": 0, "power_w": 80.0}]), hw, shipped_board_power(), SITE_MAX_W
    )
    assert r is not None and r.rule == "board_power" and "72 W" in r.message
    r = hardware_refusal(sample([{"index": 0}, {"index": 1}]), hw, shipped_board_power(), 5e3)
    assert r is not None and r.rule == "gpu_count" and "instance type" in r.message


def test_mig_counts_physical_gpus_and_at_most_seven_slices_each():
    # A MIG node: Slurm counts 7 slices of one A100; the sample has one physical GPU.
    hw = NodeHardware("gpu-1", 7, "1g.10gb")
    migs = [{"gpu_index": 0, "gpu_instance_id": i, "profile": "1g.10gb"} for i in range(7)]
    ok = sample([{"index": 0, "mig_enabled": True}], mig_instances=migs)
    assert hardware_refusal(ok, hw, shipped_board_power(), SITE_MAX_W) is None
    eight = sample([{"index": 0, "mig_enabled": True}], mig_instances=[*migs, migs[0]])
    r = hardware_refusal(eight, hw, shipped_board_power(), SITE_MAX_W)
    assert r is not None and r.rule == "mig_slices"
    orphan = sample([{"index": 0}], mig_instances=[{**migs[0], "gpu_index": 3}])
    r = hardware_refusal(orphan, hw, shipped_board_power(), SITE_MAX_W)
    assert r is not None and r.rule == "mig_slices"


def test_foreign_job_tags_are_dropped_and_counted_and_the_rest_stands():
    s = sample(
        [{"index": 0, "util_pct": 0.0, "jobs": ["101", "999"]}, {"index": 1, "jobs": ["101"]}],
        mig_instances=[{"gpu_index": 1, "gpu_instance_id": 1, "jobs": ["998"]}],
        jobs=[{"job_id": "101", "gpu_index": 0}, {"job_id": "999", "gpu_index": 0}],
    )
    kept, dropped = drop_foreign_job_tags(s, {"101"})
    assert dropped == 3  # 999 on GPU 0, 998 on the MIG slice, 999 in the job map
    assert [g.jobs for g in kept.gpus] == [("101",), ("101",)]
    assert kept.mig_instances[0].jobs == ()
    assert [j.job_id for j in kept.jobs] == ["101"]
    assert kept.gpus[0].util_pct == 0.0 and kept.node == "gpu-1"
    same, none = drop_foreign_job_tags(s, {"101", "999", "998"})
    assert same is s and none == 0


def test_a_mig_and_shard_node_is_bounded_by_its_physical_gpus_as_slurm_declares_them():
    # Slurm: 2 whole A100s, 7 devices of 1g.10gb (one GPU's slices) and 8 shards: 3 physical
    # GPUs, not 2 (whole ones) nor 9 (every GPU GRES) nor 10 (shards counted too)
    from provisioner.api.telemetry_guard import node_hardware
    from provisioner.domain.snapshot import ClusterSnapshot
    from provisioner.observe.slurm.parse import parse_scontrol_nodes

    nodes = parse_scontrol_nodes(
        "NodeName=gpu-1 Gres=gpu:a100:2,gpu:1g.10gb:7,shard:a100:8,shard:1g.10gb:0 "
        "State=IDLE Partitions=onprem ActiveFeatures=onprem"
    )
    hw = node_hardware(None, ClusterSnapshot(taken_ts=T0, nodes=nodes), "gpu-1")  # type: ignore[arg-type]
    assert hw is not None and hw.gpus == 3
    three = sample([{"index": 0}, {"index": 1}, {"index": 2, "mig_enabled": True}])
    assert hardware_refusal(three, hw, shipped_board_power(), SITE_MAX_W) is None
    four = sample([{"index": i} for i in range(4)])
    r = hardware_refusal(four, hw, shipped_board_power(), SITE_MAX_W)
    assert r is not None and r.rule == "gpu_count"
