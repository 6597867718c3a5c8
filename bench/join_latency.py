"""How long a burst VM takes to join: instance running -> its node up in Slurm (IDLE, or at once
ALLOCATED to the job waiting for it), for VMs that are hosts of their own.

The real controller, a real slurmctld on the tests' /24 (scripts/slurm-up.sh BURST_NODES=hosts)
and moto's server as AWS, as in tests/hosts/test_join_aws.py. Each round submits one 8-GPU job
per node; each instance moto runs boots as a test host (systemd-nspawn, cloud-init from the
user-data moto recorded), waits for the controller to name its node, and starts munged and
slurmd. The clock starts when the instance is listed running (its host starts booting then: a
real VM's boot, 30-90 s, is not in this figure) and stops at the first poll that shows the
node bound to it out of POWERING_UP. Polls are 0.2 s apart, with a controller pass in between.
Then the nodes idle, drain and power down, and the instances end, before the next round.

Needs root, the test-host roots (make test-host-roots) and the Slurm 24.11 root.
    .venv/bin/python bench/join_latency.py [--rounds 5] [--nodes 4] [--suites bookworm trixie]
The last line is one JSON object: per suite (Slurm version), p50 and max seconds over
rounds x nodes joins.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from provisioner.act.ports import TAG_CONTROLLER  # noqa: E402
from provisioner.clock import ManualClock  # noqa: E402
from provisioner.domain.nodes import NodeState  # noqa: E402
from provisioner.testing import hosts  # noqa: E402
from provisioner.testing.cloud_vms import (  # noqa: E402
    CloudVms,
    host_files,
    imds_sidecar,
    moto_lister,
)
from provisioner.testing.moto_faults import TEST_CREDENTIALS, FaultyMotoServer  # noqa: E402
from tests.hosts.conftest import ROOTS, SERIES, start_host_cluster  # noqa: E402
from tests.hosts.join_world import (  # noqa: E402
    REGION,
    ec2_client,
    make_controller,
    subnet_on_test_net,
)

JOB = "#!/bin/sh\nsleep 1\n"


JOINED = frozenset({NodeState.IDLE, NodeState.MIXED, NodeState.ALLOCATED})


def run_suite(suite: str, rounds: int, nodes: int, work: Path) -> list[float]:
    root = ROOTS[suite]
    cluster = start_host_cluster(suite, n_cloud=nodes)
    server = FaultyMotoServer(host=hosts.HOST_ADDRESS).start()
    server.reset()  # moto keeps its state in-process: the other suite's groups are gone
    vms: CloudVms | None = None
    try:
        ec2 = ec2_client(server.endpoint)
        c = make_controller(cluster, server.endpoint, subnet_on_test_net(ec2), work)
        booted_at: dict[str, float] = {}
        vms = CloudVms(
            root,
            work / "vms",
            moto_lister(ec2, c.policy.controller, TAG_CONTROLLER),
            imds_sidecar(sys.executable, server.endpoint, REGION),
            files=host_files(root, cluster.munge_socket, gpus=8),
        )
        script = cluster.dir / "jobs" / "sleep.sh"
        script.parent.mkdir(exist_ok=True)
        script.write_text(JOB)
        clock = c.clock
        assert isinstance(clock, ManualClock)
        latencies: list[float] = []

        def step() -> None:
            assert vms is not None
            vms.sync()
            now = time.monotonic()
            for iid in vms.running:
                booted_at.setdefault(iid, now)
            clock.set(datetime.now(UTC))
            c.reconciler.run_pass()

        for r in range(rounds):
            for _ in range(nodes):
                cluster.sh(
                    "sbatch", "--parsable", "-p", "cloud", "--gres=gpu:8", "-t", "5",
                    "--chdir=/tmp", "-o", "/dev/null", str(script),
                )  # fmt: skip
            seen: dict[str, float] = {}
            deadline = time.monotonic() + 240
            while len(seen) < nodes:
                step()
                states = {name: n.state for name, n in cluster.nodes().items()}
                for si in c.store.instances():
                    inst = si.instance
                    if (
                        inst.instance_id in booted_at
                        and inst.instance_id not in seen
                        and not inst.state.terminal
                        and inst.node_name
                        and states.get(inst.node_name) in JOINED
                    ):
                        seen[inst.instance_id] = time.monotonic() - booted_at[inst.instance_id]
                if time.monotonic() > deadline:
                    insts = [
                        (si.instance.instance_id, str(si.instance.state), si.instance.node_name)
                        for si in c.store.instances()
                    ]
                    raise SystemExit(
                        f"{suite} round {r}: only {len(seen)} of {nodes} joined: "
                        f"states={states} instances={insts} booted={booted_at}"
                    )
                time.sleep(0.2)
            latencies += seen.values()
            print(f"{suite} round {r + 1}: " + " ".join(f"{v:.2f}" for v in sorted(seen.values())))
            deadline = time.monotonic() + 240
            # the next round starts from powered-down nodes, as the first did: a job that finds
            # its node still powering down waits for Slurm, not for the VM
            while (
                vms.running
                or any(not si.instance.state.terminal for si in c.store.instances())
                or any(n.state is not NodeState.POWERED_DOWN for n in cluster.nodes().values())
            ):
                step()
                if time.monotonic() > deadline:
                    raise SystemExit(f"{suite} round {r}: the burst did not end")
                time.sleep(0.2)
        return latencies
    finally:
        if vms is not None:
            vms.close()
        server.stop()
        cluster.down()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--suites", nargs="+", default=["bookworm", "trixie"], choices=sorted(SERIES))
    args = ap.parse_args()
    figures: dict[str, object] = {"rounds": args.rounds, "nodes": args.nodes}
    # moto's test credentials, for this process and the metadata stand-ins it starts
    os.environ.update(TEST_CREDENTIALS)
    os.environ.pop("AWS_PROFILE", None)
    hosts.clean_leftovers()
    hosts.network_up()
    try:
        for suite in args.suites:
            with tempfile.TemporaryDirectory(prefix="gbt-bench-") as tmp:
                lat = run_suite(suite, args.rounds, args.nodes, Path(tmp))
            figures[f"slurm_{SERIES[suite]}"] = {
                "joins": len(lat),
                "p50_s": round(statistics.median(lat), 2),
                "max_s": round(max(lat), 2),
                "min_s": round(min(lat), 2),
            }
    finally:
        hosts.clean_leftovers()
        hosts.network_down()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
