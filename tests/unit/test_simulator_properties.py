"""Properties of the simulator over random small traces (hypothesis): clusters with a partial
last node, jobs larger than a node, same-second arrivals, every policy and estimate.

Found by this: the blind view gave back GPUs from before a reservation's start when a job
burst early, so a node showed more free GPUs than it has and a job placed there could never
start (an AssertionError deep in the replay).
"""

from __future__ import annotations

import math
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner.config import load_policy
from provisioner.domain.errors import InputError
from provisioner.plan.catalog import load_catalog
from provisioner.simulate.engine import SimSettings, Simulation, flat_catalog
from provisioner.simulate.trace import TraceJob

ROOT = Path(__file__).resolve().parents[2]
POLICY = load_policy(ROOT / "policies")
REAL = load_catalog()
POLICIES = ("default", "never", "immediate", "budget-timeout", "fixed-wait:600")

traces = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.0, 1.0, 30.0, 600.0, 3600.0]),  # gap after the previous job
        st.sampled_from([1.0, 60.0, 3600.0, 86_400.0, 0.5, 4321.0]),  # runtime
        st.sampled_from([1, 1, 2, 3, 4, 5, 8, 16]),  # GPUs
        st.sampled_from(["", "u1", "u2"]),
        st.sampled_from(["", "g1"]),
    ),
    min_size=1,
    max_size=40,
)


def _jobs(rows: list[tuple[float, float, int, str, str]]) -> list[TraceJob]:
    t, out = 0.0, []
    for k, (gap, runtime, gpus, user, group) in enumerate(rows):
        t += gap
        out.append(TraceJob(f"j{k:03d}", t, runtime, gpus, user=user, group=group))
    return out


def _peak(runs: list[tuple[float, float, int]]) -> int:
    """Most GPUs in use at once by (start, end, GPUs) runs: ends before starts at a tie."""
    events = sorted([(s, 1, g) for s, _, g in runs] + [(e, 0, -g) for _, e, g in runs])
    level = peak = 0
    for _, _, g in events:
        level += g
        peak = max(peak, level)
    return peak


@settings(max_examples=60, deadline=None)
@given(
    rows=traces,
    onprem=st.sampled_from([1, 7, 8, 12, 16, 30]),
    per_node=st.sampled_from([4, 8]),
    estimate=st.sampled_from(["exact", "none", "history"]),
    boot=st.sampled_from([0.0, 300.0]),
    real=st.booleans(),
)
def test_every_job_runs_once_within_on_prem_capacity(
    rows: list[tuple[float, float, int, str, str]],
    onprem: int,
    per_node: int,
    estimate: str,
    boot: float,
    real: bool,
) -> None:
    # flat: the published model; real: the bundled catalog, with spot interruptions drawn
    jobs = _jobs(rows)
    flat = flat_catalog(Decimal("4.10"), "A100", sorted({j.gpus for j in jobs}))
    catalog = REAL if real else flat
    s = SimSettings(
        onprem_gpus=onprem,
        gpus_per_node=per_node,
        boot_s=boot,
        estimate=estimate,  # type: ignore[arg-type]
        billing_min_s=60.0 if real else 0.0,
        spot_interruptions=real,
    )
    for name in POLICIES:
        if name == "never" and max(j.gpus for j in jobs) > onprem:
            with pytest.raises(InputError, match="policy never cannot run it"):
                Simulation(jobs, s, POLICY, catalog, name)
            continue
        sim = Simulation(jobs, s, POLICY, catalog, name)
        r = sim.run()
        assert r.jobs == len(jobs)
        for job, wait, jct, cloud in zip(jobs, sim.wait, sim.jct, sim.in_cloud, strict=True):
            assert math.isfinite(jct) and wait >= 0, (name, job)
            assert jct >= job.duration_s - 1e-6, (name, job)  # nobody finishes early
            if not cloud:
                assert job.gpus <= onprem
        # every job not burst ran on-prem exactly once, and never past the cluster's GPUs
        assert len(sim.onprem_runs) == len(jobs) - sum(sim.in_cloud)
        assert _peak(sim.onprem_runs) <= onprem
        if not real:  # a GPU-hour on the flat model costs $4.10, whoever bought it
            assert float(r.cloud_cost_usd) == pytest.approx(4.10 * r.cloud_gpu_hours, rel=1e-9)
        if name == "never":
            assert r.cloud_cost_usd == 0 and not any(sim.in_cloud)
        # the planner's own view never holds more GPUs than the nodes have
        for cap, free in zip(sim.view.cap, sim.view.free, strict=True):
            assert max(free) <= cap
