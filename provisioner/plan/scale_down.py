"""Scale-down: drain burst nodes idle past the idle timeout (Slurm and NVML agree), terminate
drained ones, and terminate instances that never joined within the join timeout."""

from __future__ import annotations

from provisioner.domain.instances import join_timed_out
from provisioner.domain.nodes import NodeKind, NodeState
from provisioner.domain.plan import Drain, ReasonCode, Terminate
from provisioner.plan.planning_pass import PlanningPass


def scale_down(p: PlanningPass, claimed: set[str]) -> None:
    """`claimed`: burst nodes this pass gave a pending job, never drained."""
    guard = p.policy.guardrails
    now = p.now
    burst = (n for n in p.snap.nodes if n.kind is NodeKind.BURST)
    for node in sorted(burst, key=lambda n: n.name):
        if node.state is NodeState.DRAINED or (
            node.state is NodeState.DRAINING and node.gpus_alloc == 0
        ):
            d = p.decide(ReasonCode.TERMINATE_DRAINED, (), node=node.name)
            p.actions.append(Terminate(node.name, node.instance_id, node.pool, d))
            continue
        if node.state is not NodeState.IDLE or node.gpus_alloc > 0 or node.name in claimed:
            continue
        if node.idle_since_ts is None or now - node.idle_since_ts < guard.idle_timeout_s:
            continue
        nvml_idle = node.gpus_idle_by_nvml(guard.nvml_idle_util_pct)
        if nvml_idle is False or (nvml_idle is None and guard.require_nvml_idle):
            p.decide(
                ReasonCode.KEEP_GPU_BUSY,
                (),
                node=node.name,
                detail={
                    "why": "NVML shows GPU load" if nvml_idle is False else "no NVML sample",
                },
            )
            continue
        d = p.decide(
            ReasonCode.SCALE_DOWN_IDLE,
            (),
            node=node.name,
            detail={"idle_s": f"{now - node.idle_since_ts:.0f}"},
        )
        p.actions.append(Drain(node.name, node.instance_id, node.pool, d))
    for inst in p.snap.instances:
        if join_timed_out(inst, now, guard.join_timeout_s):
            d = p.decide(
                ReasonCode.JOIN_TIMEOUT,
                (),
                instance=inst.instance_id,
                detail={"state": inst.state.value},
            )
            p.actions.append(Terminate(inst.node_name, inst.instance_id, inst.pool, d))
