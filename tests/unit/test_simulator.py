"""The simulator on tiny traces whose outcome is worked out by hand.

Cluster: one node of 8 GPUs; flat $1 per GPU-hour; boot 0 s unless said otherwise.
Trace: j1 and j2 take the whole node for 1 h from t=0; j3 (1 GPU, 10,000 s) comes at t=100.
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
from provisioner.plan.selection import portfolio_for
from provisioner.simulate.engine import SimSettings, flat_catalog, simulate
from provisioner.simulate.trace import TraceJob, load_trace

TRACE = [
    TraceJob("j1", 0.0, 3600.0, 8),
    TraceJob("j2", 0.0, 3600.0, 8),
    TraceJob("j3", 100.0, 10_000.0, 1),
]
CAT = flat_catalog(Decimal("1"), "A100", [1, 8])


def pol(**wait):
    return policy_from_mapping(
        {"onprem": {"gpu_model": "A100", "gpus_per_node": 8}, "waiting": {"default": wait}},
        "test",
    )


def run(name: str, policy=None, estimate: str = "exact", boot: float = 0.0):
    settings = SimSettings(
        onprem_gpus=8, gpus_per_node=8, boot_s=boot, estimate=estimate, billing_min_s=0.0
    )
    return simulate(TRACE, settings, policy or pol(runtime_factor=0.5), CAT, name)


def test_never_queues_everything_on_prem() -> None:
    r = run("never")
    # j2 waits for j1 (3600 s); j3 cannot slip in before j2 ends at 7200 (it runs 10,000 s)
    assert r.cloud_cost_usd == 0
    assert r.avg_wait_s == pytest.approx((0 + 3600 + 7100) / 3)
    assert r.max_wait_s == 7100
    assert r.avg_jct_s == pytest.approx((3600 + 7200 + 17100) / 3)


def test_immediate_bursts_whatever_cannot_start() -> None:
    r = run("immediate")
    # j2: 8 GPU-h; j3: 10,000 GPU-s
    assert r.cloud_gpu_hours == pytest.approx(8 + 10_000 / 3600)
    assert float(r.cloud_cost_usd) == pytest.approx(8 + 10_000 / 3600, abs=1e-6)
    assert r.avg_wait_s == 0 and r.burst_fraction == pytest.approx(2 / 3)


def test_fixed_wait_times_out_after_its_limit() -> None:
    r = run("fixed-wait:4000")
    # j2 starts at 3600 (within 4000): on-prem; j3 would start at 7200: bursts at 100+4000
    assert r.avg_wait_s == pytest.approx((0 + 3600 + 4000) / 3)
    assert float(r.cloud_cost_usd) == pytest.approx(10_000 / 3600, abs=1e-6)
    assert r.timeouts == 1


def test_default_decides_at_arrival_from_the_prediction() -> None:
    # budgets: j2 0.5*8*3600 = 14,400 >= 3600 waits; j3 0.5*1*10,000 = 5000 < 7100 bursts now
    r = run("default")
    assert r.avg_wait_s == pytest.approx((0 + 3600 + 0) / 3)
    assert float(r.cloud_cost_usd) == pytest.approx(10_000 / 3600, abs=1e-6)
    assert r.timeouts == 0


def test_boot_time_is_waited_and_billed() -> None:
    r = run("immediate", boot=300)
    assert r.avg_wait_s == pytest.approx((0 + 300 + 300) / 3)
    assert float(r.cloud_cost_usd) == pytest.approx(8 * 3900 / 3600 + 10_300 / 3600, abs=1e-6)


def test_runtime_blind_planner_can_be_wrong_and_then_times_out() -> None:
    # no runtimes: budget = per_gpu_s * gpus; the planner assumes 1000 s per job.
    # j3: budget 2000; the planner's view has the node free at 2000 (predicted wait 1900):
    # it keeps j3 on-prem, but j3 really could start only at 7200: it bursts at 100 + 2000.
    p = pol(per_gpu_s=2000, default_runtime_s=1000)
    r = run("default", policy=p, estimate="none")
    assert r.timeouts == 1
    assert r.max_wait_s == 3600  # j2 (budget 16,000) stays and waits for j1
    assert r.avg_wait_s == pytest.approx((0 + 3600 + 2000) / 3)
    assert float(r.cloud_cost_usd) == pytest.approx(10_000 / 3600, abs=1e-6)


def test_unknown_policy_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown policy"):
        run("sometimes")
    with pytest.raises(ValueError, match="SECONDS"):
        run("fixed-wait:soon")


def test_trace_errors_name_file_line_and_column(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("job_id,submit_s,duration_s,gpus\na,0,10,1\nb,5,-1,1\n")
    with pytest.raises(InputError, match=r"t\.csv: line 3: duration_s: must be > 0"):
        load_trace(f)
    f.write_text("job_id,submit_s,gpus\na,0,1\n")
    with pytest.raises(InputError, match="missing column"):
        load_trace(f)
    g = tmp_path / "t.csv.gz"
    g.write_bytes(b"not gzip")
    with pytest.raises(InputError, match="corrupt gzip"):
        load_trace(g)


def test_trace_rejects_numbers_that_are_not_finite(tmp_path: Path) -> None:
    # a NaN submit time used to hang the replay (no event ever comes round), a NaN GPU count
    # raised a bare ValueError, and an infinite runtime reported an infinite JCT
    f = tmp_path / "t.csv"
    for row, col in (
        ("b,nan,10,1", "submit_s"),
        ("b,5,inf,1", "duration_s"),
        ("b,5,9,nan", "gpus"),
    ):
        f.write_text(f"job_id,submit_s,duration_s,gpus\na,0,10,1\n{row}\n")
        with pytest.raises(InputError, match=rf"t\.csv: line 3: {col}: not a finite number"):
            load_trace(f)


def test_trace_reads_a_byte_order_mark_and_spaces_in_the_header(tmp_path: Path) -> None:
    f = tmp_path / "excel.csv"
    f.write_bytes(b"\xef\xbb\xbfjob_id, submit_s ,duration_s,gpus\r\nx,7,60,2\r\n")
    assert load_trace(f) == [TraceJob("x", 7.0, 60.0, 2)]
    f.write_bytes(b"job_id,submit_s,duration_s,gpus\nx,7,60,2\n\xff\xfe,1,1,1\n")
    with pytest.raises(InputError, match=r"excel\.csv: not UTF-8 text"):
        load_trace(f)


def test_a_job_nothing_can_hold_is_named_before_the_replay() -> None:
    big = [*TRACE, TraceJob("j4", 200.0, 60.0, 16)]
    settings = SimSettings(onprem_gpus=8, gpus_per_node=8, boot_s=0.0, billing_min_s=0.0)
    with pytest.raises(InputError, match="trace job j4 needs 16 GPUs, more than the 8 on-prem"):
        simulate(big, settings, pol(), CAT, "never")
    # the flat catalog has 1- and 8-GPU offers: two 8-GPU nodes hold it, so immediate bursts
    # it, with j2 and j3 (see test_immediate_bursts_whatever_cannot_start)
    assert simulate(big, settings, pol(), CAT, "immediate").burst_fraction == pytest.approx(0.75)
    other_model = flat_catalog(Decimal("1"), "H100", [1, 8])
    with pytest.raises(InputError, match="no on-demand A100 offer in the catalog holds it"):
        simulate(big, settings, pol(), other_model, "immediate")


@pytest.mark.parametrize("estimate", ["exact", "none"])
def test_a_big_job_a_guardrail_holds_back_is_named_not_asserted(estimate: str) -> None:
    # 16 GPUs need two cloud nodes, and the policy allows one per pass: the planner blocks it,
    # and on-prem (8 GPUs) can never start it
    p = policy_from_mapping(
        {
            "onprem": {"gpu_model": "A100", "gpus_per_node": 8},
            "guardrails": {"max_scale_up_nodes_per_pass": 1},
        },
        "test",
    )
    settings = SimSettings(
        onprem_gpus=8,
        gpus_per_node=8,
        boot_s=0.0,
        estimate=estimate,
        billing_min_s=0.0,  # type: ignore[arg-type]
    )
    big = [*TRACE, TraceJob("j4", 200.0, 60.0, 16)]
    with pytest.raises(
        InputError, match=r"j4 needs 16 GPUs.*would not burst it \(blocked_pool_max\)"
    ):
        simulate(big, settings, p, CAT, "default")


def test_cli_simulate_writes_the_documented_json(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv.gz"
    rows = "job_id,submit_s,duration_s,gpus,gpu_type,user,group,status\n" + "".join(
        f"x{i},{i * 60},{600 + 37 * i},{1 + i % 3},,,g{i % 2},unknown\n" for i in range(60)
    )
    with gzip.open(trace, "wt") as fh:
        fh.write(rows)
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    res = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(trace),
            "--onprem-gpus",
            "8",
            "--gpus-per-node",
            "4",
            "--policy",
            "default",
            "--policy",
            "never",
            "--policy",
            "immediate",
            "--policy",
            "fixed-wait:600",
            "--json",
            str(out),
            "--plot",
            str(png),
            "--no-progress",
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert [d["policy"] for d in data] == ["default", "never", "immediate", "fixed-wait:600"]
    keys = {
        "policy",
        "jobs",
        "cloud_cost_usd",
        "cloud_gpu_hours",
        "onprem_gpu_utilization",
        "avg_jct_s",
        "avg_wait_s",
        "p95_wait_s",
        "p99_wait_s",
        "max_wait_s",
        "burst_fraction",
        "wall_s",
    }
    assert all(keys <= d.keys() and d["jobs"] == 60 for d in data)
    never = data[1]
    assert never["cloud_cost_usd"] == 0 and never["burst_fraction"] == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_cli_simulate_learns_runtimes_on_any_csv_trace(tmp_path: Path) -> None:
    # a plain CSV with only the required columns (no user, no group): history falls back to
    # the partition; every job ends up somewhere, and the regret figures are reported
    trace = tmp_path / "t.csv"
    trace.write_text(
        "job_id,submit_s,duration_s,gpus\n"
        + "".join(f"h{i},{i * 30},{900 + 50 * (i % 5)},{1 + i % 4}\n" for i in range(40))
    )
    out = tmp_path / "h.json"
    args = ["simulate", "--trace", str(trace), "--onprem-gpus", "4", "--gpus-per-node", "4"]
    more = ["--estimate", "history", "--policy", "default", "--policy", "never", "--json"]
    res = CliRunner().invoke(app, [*args, *more, str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    default, never = json.loads(out.read_text())
    assert default["jobs"] == never["jobs"] == 40
    assert {"regret_usd", "regret_jobs", "regret_within_budget_usd"} <= default.keys()
    assert never["regret_usd"] == 0 and never["cloud_cost_usd"] == 0
    res = CliRunner().invoke(app, [*args, "--estimate", "psychic", "--no-progress"])
    assert res.exit_code == 2 and "exact, none, history, limits, history+limits" in res.output


def test_cli_bad_simulate_arguments_exit_2(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app, ["simulate", "--trace", str(tmp_path / "no.csv"), "--no-progress"]
    )
    assert res.exit_code == 2 and "cannot read trace" in res.output
    res = CliRunner().invoke(app, ["simulate", "--policy", "maybe", "--no-progress"])
    assert res.exit_code == 2 and "unknown policy" in res.output


def test_spot_interruptions_cost_rework_and_time() -> None:
    from provisioner.plan.catalog import Catalog
    from tests.unit.helpers import offer

    # one spot offer with the worst interruption bucket, one on-demand fallback
    cat = Catalog((offer(itype="s1", gpus=1, od="10", spot="1", risk=100),))
    p = policy_from_mapping(
        {
            "onprem": {"gpu_model": "A100", "gpus_per_node": 8},
            "waiting": {"default": {"runtime_factor": 0.0}},
            "spot": {"reference_hours": 1.0, "rework_fraction": 1.0},
        },
        "test",
    )
    jobs = [TraceJob(f"s{i}", float(i), 36_000.0, 1) for i in range(20)]
    calm = simulate(jobs, SimSettings(onprem_gpus=0, boot_s=0.0), p, cat, "default")
    rough = simulate(
        jobs,
        SimSettings(onprem_gpus=0, boot_s=0.0, spot_interruptions=True, seed=3),
        p,
        cat,
        "default",
    )
    assert calm.spot_interruptions == 0
    assert float(calm.cloud_cost_usd) == pytest.approx(20 * 10 * 1.0, abs=1e-6)
    # hazard 1/h over 10 h: almost every job is interrupted, loses all progress (rework 1.0)
    # and reruns on on-demand at $10/h
    assert rough.spot_interruptions >= 15
    assert rough.cloud_cost_usd > 5 * calm.cloud_cost_usd
    assert rough.avg_jct_s > calm.avg_jct_s


def test_cloud_gpus_over_time_is_the_billed_step_function() -> None:
    r = run("immediate")
    # j2 bursts at t=0 on an 8-GPU node for 3600 s; j3 at t=100 on a 1-GPU node for 10,000 s.
    assert r.cloud_gpus_over_time == ((0.0, 8), (100.0, 9), (3600.0, 1), (10_100.0, 0))
    assert r.to_dict()["cloud_gpus_over_time"] == [[0.0, 8], [100.0, 9], [3600.0, 1], [10100.0, 0]]
    assert run("never").cloud_gpus_over_time == ()


# History: a (user u) runs 2000 s and has ended when b and c come. b takes the node until 6000;
# c (1 GPU, 100 s) comes at 4100 and could start only at 6000.
HIST = [
    TraceJob("a", 0.0, 2000.0, 8, user="u"),
    TraceJob("b", 4000.0, 2000.0, 8, user="u"),
    TraceJob("c", 4100.0, 100.0, 1, user="u"),
]


def _hist_run(estimate: str):
    settings = SimSettings(
        onprem_gpus=8, gpus_per_node=8, boot_s=0.0, estimate=estimate, billing_min_s=0.0
    )
    return simulate(HIST, settings, pol(runtime_factor=0.5), CAT, "default")


def test_history_learns_runtimes_as_the_trace_replays() -> None:
    # history: c is predicted at user u's 2000 s (one sample: spread unknown, share 0.5);
    # budget 0.5 * 1 * 2000 = 1000 < predicted wait 1900: waits 500 s, then bursts.
    r = _hist_run("history")
    assert r.avg_wait_s == pytest.approx(500 / 3)
    assert r.timeouts == 1
    assert float(r.cloud_cost_usd) == pytest.approx(100 / 3600, abs=1e-9)
    # none: budget 2772 s (per GPU); share 0.5 -> waits 1386 s
    assert _hist_run("none").avg_wait_s == pytest.approx(1386 / 3)
    # exact: budget 0.5 * 100 = 50 s < 1900: bursts at arrival
    assert _hist_run("exact").avg_wait_s == 0


def test_regret_counts_bursts_that_on_prem_would_have_started_before_the_node_was_ready() -> None:
    # d comes at 800 while a holds the node until 1000; immediate bursts it, the node is ready
    # at 1100 (boot 300): on-prem would have started it at 1000. Billed 300 + 100 s at $1/h.
    trace = [TraceJob("a", 0.0, 1000.0, 8), TraceJob("d", 800.0, 100.0, 1)]
    settings = SimSettings(onprem_gpus=8, gpus_per_node=8, boot_s=300.0, billing_min_s=0.0)
    r = simulate(trace, settings, pol(runtime_factor=0.5), CAT, "immediate")
    assert r.regret_jobs == 1
    assert r.regret_usd == pytest.approx(400 / 3600)
    # its budget (0.5 * 1 * 100 = 50 s) ends at 850, before 1000: not regret by that measure
    assert r.regret_within_budget_jobs == 0
    # never bursting has no regret at all
    assert simulate(trace, settings, pol(), CAT, "never").regret_usd == 0


def test_limits_tell_the_planner_each_jobs_time_limit_and_bound_what_history_learns() -> None:
    """--estimate limits: the planner sees each job's time limit (from the published model of
    user estimates, simulate/user_estimates.py), never below the job's runtime; with
    history+limits a learned runtime is clipped at the limit, and a job with no history yet
    is told its limit. Seeded: the same seed, the same limits."""
    import math
    import random

    from provisioner.simulate.engine import Simulation, job_limits

    rng = random.Random(3)  # heavy-tailed runtimes, 1 minute to 5 hours
    runtimes = [math.exp(rng.uniform(math.log(60), math.log(5 * 3600))) for _ in range(200)]
    jobs = [TraceJob(f"j{i}", 10.0 * i, rt, 1, user="u") for i, rt in enumerate(runtimes)]
    limits = job_limits(jobs, None, 7)
    assert limits == job_limits(jobs, None, 7) and limits != job_limits(jobs, None, 8)
    assert all(lim >= j.duration_s for lim, j in zip(limits, jobs, strict=True))
    assert max(limits) == 86_400  # the longest runtime (under 5 h) rounded up to a day
    settings = SimSettings(onprem_gpus=8, gpus_per_node=8, estimate="limits", seed=7)
    sim = Simulation(jobs, settings, pol(runtime_factor=0.5), CAT, "default")
    told = sim._tell(5)
    assert told == (limits[5], "limit", None)
    assert sim._job(5, told).time_limit_s == limits[5]
    both = SimSettings(onprem_gpus=8, gpus_per_node=8, estimate="history+limits", seed=7)
    sim = Simulation(jobs, both, pol(runtime_factor=0.5), CAT, "default")
    assert sim._tell(0) == (limits[0], "limit", None)  # nothing learned yet
    assert sim.history is not None
    sim.history.observe(user="u", group="", partition="onprem", runtime_s=10**6)
    rt, source, _ = sim._tell(3)
    assert rt == limits[3] and source == "user"  # learned 10^6 s, clipped at the limit


def _limited(policy, limits: list[float]):  # type: ignore[no-untyped-def]
    """Two 8-GPU jobs on one 8-GPU node under --estimate limits, with the limits given: the
    first (1 h, limit 2 h) holds the node; the second (60 s, limit 600 s) arrives at 10 s."""
    from provisioner.simulate.engine import Simulation

    jobs = [TraceJob("a", 0.0, 3600.0, 8), TraceJob("b", 10.0, 60.0, 8)]
    settings = SimSettings(
        onprem_gpus=8, gpus_per_node=8, boot_s=0.0, estimate="limits", billing_min_s=0.0
    )
    sim = Simulation(jobs, settings, policy, CAT, "default")
    sim.limits = limits
    return sim


def test_a_job_told_only_its_limit_is_planned_as_the_controller_plans_it() -> None:
    """What the planner gets for a job told its limit is what the controller builds from
    Slurm (observe/slurm): the limit, no estimate, no learned source; so the limit is trusted
    (hedge 0) unless the policy takes limits as guesses. By hand: job b's budget is
    0.5 x 8 x 600 s = 2,400 s and its start is predicted at 7,200 s (a's limit), beyond it.
    Trusted, b bursts at its arrival (JCT 60 s); hedged, it waits half its budget, 1,200 s,
    and bursts then (on-prem frees at 3,600 s, later): JCT 1,260 s."""
    sim = _limited(pol(runtime_factor=0.5), [7200.0, 600.0])
    job = sim._job(1, sim._tell(1))
    assert (job.expected_runtime_s, job.runtime_source, job.time_limit_s) == (None, "", 600.0)
    trusted = sim.run()
    assert trusted.burst_fraction == 0.5 and sim.jct[1] == pytest.approx(60.0)
    sim = _limited(pol(runtime_factor=0.5, hedge_limits=True), [7200.0, 600.0])
    hedged = sim.run()
    assert hedged.burst_fraction == 0.5 and sim.jct[1] == pytest.approx(1260.0)


def test_cli_limits_need_a_maximum_of_an_hour_or_more() -> None:
    res = CliRunner().invoke(
        app, ["simulate", "--estimate", "limits", "--max-limit", "600", "--no-progress"]
    )
    assert res.exit_code == 2 and "--max-limit" in res.output
    res = CliRunner().invoke(app, ["simulate", "--estimate", "guesses", "--no-progress"])
    assert res.exit_code == 2 and "history+limits" in res.output


def test_cli_simulate_adaptive_reports_its_rounds_and_regret(tmp_path: Path) -> None:
    """Three days of jobs: rounds at the first arrivals of days 1 and 2. The `default`
    candidate replayed beside the adaptive run is the same run as `--policy default`, and the
    regret is adaptive's dollars less the best fixed candidate's."""
    trace = tmp_path / "t.csv"
    trace.write_text(
        "job_id,submit_s,duration_s,gpus,user,group\n"
        + "".join(
            f"a{i},{i * 1800},{3000 + 900 * (i % 7)},{1 + i % 4},u{i % 3},g{i % 2}\n"
            for i in range(144)
        )
    )
    out = tmp_path / "a.json"
    res = CliRunner().invoke(
        app,
        [
            "simulate", "--trace", str(trace), "--onprem-gpus", "8", "--gpus-per-node", "4",
            "--estimate", "history", "--policy", "adaptive", "--policy", "default",
            "--json", str(out), "--no-progress",
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    adaptive, default = json.loads(out.read_text())
    assert adaptive["policy"] == "adaptive" and adaptive["rounds"] == 2
    cands = {c["policy"]: c for c in adaptive["candidates"]}
    assert set(cands) == {c.name for c in portfolio_for("history")}
    assert cands["default"]["cloud_cost_usd"] == default["cloud_cost_usd"]
    assert cands["default"]["avg_jct_s"] == default["avg_jct_s"]
    best = cands[adaptive["best_fixed"]]
    assert adaptive["best_fixed_cloud_cost_usd"] == best["cloud_cost_usd"]
    assert adaptive["regret_vs_best_fixed_usd"] == pytest.approx(
        adaptive["cloud_cost_usd"] - best["cloud_cost_usd"], abs=0.011
    )
    assert "best fixed candidate in hindsight" in res.output
