"""Act: what a pass changes in the clouds and in Slurm.

Scale-ups (intent first, the chosen offer then its fallbacks, back-off fed from the outcomes),
partitions widened for burst jobs, drains (`power_down_asap`), terminations (intent first), and
what the sync plan asks for (adoptions, bindings, lifecycle steps, node fixes, kills). The
`Actuator` holds the per-offer back-off, the one piece of state a scale-up changes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from provisioner.act.actuator import scale_up_with_fallback, terminate_instance
from provisioner.act.backoff_feed import BackoffSettings
from provisioner.act.ports import OwnedInstance, PoolSpec, request_token
from provisioner.config.models import PoolPolicy
from provisioner.domain.errors import CloudError, ProvisionerError
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.offers import OfferKey
from provisioner.domain.plan import Decision, Drain, Plan, ReasonCode, ScaleUp, decision_id
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.plan.backoff import Backoff
from provisioner.reconcile.context import (
    STEP_DRAIN_AFTER_SLURM,
    STEP_SCALE_UP_AFTER_CLOUD,
    STEP_SCALE_UP_AFTER_INTENT,
    STEP_SCALE_UP_BEFORE_REGISTER,
    STEP_TERMINATE_AFTER_CLOUD,
    STEP_TERMINATE_AFTER_INTENT,
    PassContext,
    PassReport,
)
from provisioner.reconcile.outcomes import error_code
from provisioner.reconcile.sync import (
    TERMINABLE,
    Kill,
    SyncPlan,
    owned_from_record,
    plan_adoptions,
)
from provisioner.store import Store

log = logging.getLogger("provisioner.loop")

S = InstanceState


def terminating_moves(
    store: Store, instance_id: str, reason: str
) -> list[tuple[str, InstanceState, str]]:
    """The step to `terminating` for a record still live (none for a closed or unknown one)."""
    si = store.instance(instance_id)
    if si is None or si.instance.state not in TERMINABLE:
        return []
    return [(instance_id, S.TERMINATING, reason or "terminate")]


class Actuator:
    """Carries out sync plans and plans. `backoff` is replaced by each scale-up's outcome."""

    def __init__(self, ctx: PassContext, settings: BackoffSettings, backoff: Backoff) -> None:
        self.ctx = ctx
        self.deps = ctx.deps
        self.store = ctx.store
        self.policy = ctx.policy
        self.config = ctx.config
        self.controller = ctx.controller
        self.settings = settings
        self.backoff = backoff

    def apply_sync(
        self, sp: SyncPlan, now: float, snap: ClusterSnapshot, report: PassReport
    ) -> None:
        by_token: dict[str, list[CloudInstance]] = {}
        for a in sp.adopt:
            by_token.setdefault(a.token, []).append(a.instance)
        for token, insts in by_token.items():
            self.store.confirm(token, now, instances=insts)
            report.adopted += len(insts)
            log.info("adopted %s (intent %s)", [i.instance_id for i in insts], token[:8])
        for rec in sp.orphans:
            pool = self.ctx.pool(rec.pool)
            # the pool's team pays for its orphans: their own decision may not be on record
            self.store.add_instance(rec, team=pool.team if pool is not None else "")
            report.adopted += 1
            log.warning(
                "orphan %s (pool %s, launched %.0f) found in the cloud with no record: "
                "recorded from its tags, billed as kind orphan",
                rec.instance_id,
                rec.pool,
                rec.launched_ts,
            )
        for b in sp.bind:
            self.store.set_node_name(b.instance_id, b.node)
            log.info("bound %s to slurm node %s", b.instance_id, b.node)
        for m in sp.moves:
            try:
                self.store.transition(m.instance_id, m.to, now, m.reason)
            except (ValueError, ProvisionerError, LookupError) as exc:
                report.errors.append(f"move {m.instance_id}: {exc}")
        for fix in sp.nodes:
            self._fix_node(fix.node, fix.action, fix.reason, report)
        for k in sp.kills:
            reason = ReasonCode.JOIN_TIMEOUT if k.join_failure else ReasonCode.TERMINATE_DRAINED
            did = decision_id(now, reason, k.instance_id)
            if k.transition:
                self.store.record_decisions(
                    [
                        Decision(
                            did,
                            reason,
                            detail={"instance": k.instance_id, "why": k.reason, "by": "sync"},
                        )
                    ],
                    now,
                )
            self._kill(k, did, now, report)

    def _fix_node(self, node: str, action: str, reason: str, report: PassReport) -> None:
        ctl = self.deps.node_control
        if ctl is None:
            return
        self.store.check_fence()
        try:
            if action == "resume":
                ctl.resume(node)
            elif action == "drain":
                ctl.drain_and_power_down(node, reason)
            else:
                ctl.mark_failed(node, reason)
            log.info("slurm node %s: %s (%s)", node, action, reason)
        except ProvisionerError as exc:
            report.errors.append(f"node {node} {action}: {exc}")

    def _kill(self, k: Kill, did: str, now: float, report: PassReport) -> bool:
        """Terminate one instance, intent first. False when the cloud call failed."""
        ports = self.deps.clouds.get(k.owned.cloud)
        if ports is None:
            report.errors.append(f"terminate {k.instance_id}: no port for {k.owned.cloud}")
            return False
        if k.fail_node:
            self._fix_node(k.fail_node, "fail", k.reason, report)
        token = request_token(did, k.instance_id, "terminate")
        si = self.store.instance(k.instance_id)
        self.store.record_intent(
            "terminate",
            token,
            now,
            pool=si.instance.pool if si else str(k.owned.pool),
            instance_id=k.instance_id,
            decision_id=did,
            payload={
                "reason": k.reason,
                "cloud": k.owned.cloud,
                "region": k.owned.region,
                "zone": k.owned.zone,
                "instance_type": k.owned.instance_type,
                "group": k.owned.group,
            },
        )
        self.ctx.hook(STEP_TERMINATE_AFTER_INTENT)
        self.store.check_fence()
        err = terminate_instance(k.owned, did, ports.capacity)
        if err is not None:
            self.store.fail_intent(token, now, error_code(err), str(err))
            report.errors.append(f"terminate {k.instance_id}: {error_code(err)}")
            return False
        self.ctx.hook(STEP_TERMINATE_AFTER_CLOUD)
        moves = terminating_moves(self.store, k.instance_id, k.reason) if k.transition else []
        self.store.confirm(token, now, transitions=moves)
        report.terminated += 1
        log.info("terminated %s: %s", k.instance_id, k.reason)
        return True

    def act(
        self,
        plan: Plan,
        view: ClusterSnapshot,
        owned: Mapping[str, OwnedInstance],
        now: float,
        report: PassReport,
    ) -> None:
        """Scale-ups, partitions for jobs covered by capacity in flight, drains, terminations."""
        jobs = {j.job_id: j for j in view.pending}
        for su in plan.scale_ups:
            try:
                self.scale_up(su, view, jobs, now, report)
            except (CloudError, ProvisionerError) as exc:
                report.errors.append(f"scale-up {su.pool}: {exc}")
                log.warning("scale-up for %s failed: %s", su.pool, exc)
        for d in plan.decisions:
            if d.reason is ReasonCode.COVERED_BY_INFLIGHT:
                pool = self.ctx.pool(d.detail.get("pool", ""))
                if pool is not None:
                    self._move_jobs(d.job_ids, pool, jobs, report)
        for dr in plan.drains:
            self._drain(dr, now, report)
        for t in plan.terminations:
            si = self.store.instance(t.instance_id) if t.instance_id else None
            if si is None or si.instance.state not in (
                S.REQUESTED,
                S.ALLOCATED,
                S.JOINING,
                S.READY,
                S.DRAINING,
            ):
                continue
            listed = owned.get(t.instance_id)
            inst = si.instance
            join = t.decision.reason is ReasonCode.JOIN_TIMEOUT
            k = Kill(
                inst.instance_id,
                listed or owned_from_record(inst),
                f"{t.decision.reason}: {t.decision.decision_id}",
                fail_node=inst.node_name if join and inst.node_name else "",
                join_failure=join,
            )
            self._kill(k, t.decision.decision_id, now, report)

    def _fallback_specs(self, su: ScaleUp, pool: PoolPolicy) -> list[PoolSpec]:
        """The chosen offer, then the fallbacks the planner chose, as pool specs."""
        keys: list[OfferKey] = [su.offer, *su.fallbacks]
        specs = []
        for key in keys:
            spec = self.ctx.spec(pool, key, su.decision.decision_id)
            if spec is not None:
                specs.append(spec)
        return specs

    def scale_up(
        self,
        su: ScaleUp,
        view: ClusterSnapshot,
        jobs: Mapping[str, Any],
        now: float,
        report: PassReport,
    ) -> None:
        pool = self.ctx.pool(su.pool)
        ports = self.deps.clouds.get(pool.cloud) if pool is not None else None
        did = su.decision.decision_id
        report.scale_ups += 1
        report.nodes_requested += su.nodes
        if pool is None or ports is None:
            self._failed_without_call(su, "config:no_cloud_port", now)
            report.errors.append(f"scale-up {su.pool}: no cloud port")
            return
        try:
            specs = self._fallback_specs(su, pool)
        except KeyError as exc:  # no boot image configured for the region
            self._failed_without_call(su, "config:no_image", now, str(exc))
            report.errors.append(f"scale-up {su.pool}: {exc}")
            return
        team = su.decision.team or pool.team
        tokens: dict[OfferKey, str] = {}

        def record(spec: PoolSpec, target: int, token: str) -> None:
            before = ports.capacity.group_status(spec).desired
            offer = self.ctx.offer(spec.offer)
            price = offer.price(spec.capacity) if offer is not None else None
            self.store.record_intent(
                "scale_up",
                token,
                now,
                pool=pool.name,
                offer=spec.offer,
                nodes=max(0, target - before),
                decision_id=did,
                team=team,
                price_usd_hr=price,
                payload={
                    "target": target,
                    "group": spec.group_name,
                    "gpus": spec.gpus,
                    "gpu_model": spec.gpu_model,
                    "jobs": list(su.job_ids),
                },
            )
            tokens[spec.offer] = token
            self.ctx.hook(STEP_SCALE_UP_AFTER_INTENT)
            self.store.check_fence()  # a controller that lost the lease stops before the call

        outcome = scale_up_with_fallback(
            specs,
            su.nodes,
            ports={pool.cloud: ports},
            backoff=self.backoff,
            now_ts=now,
            settings=self.settings,
            record_intent=record,
        )
        self.ctx.hook(STEP_SCALE_UP_AFTER_CLOUD)
        self.backoff = outcome.backoff
        placed = {p.token for p in outcome.placed}
        partial = {f.offer: f.error for f in outcome.failed}
        for p in outcome.placed:
            result: dict[str, Any] = {"added": p.added, "target": p.target, "group": p.group}
            if p.offer in partial:
                result["shortfall_code"] = error_code(partial[p.offer])
            self.store.confirm(p.token, now, result=result)
        for f in outcome.failed:
            tok = tokens.get(f.offer)
            if tok is None:
                self._failed_without_call(su, error_code(f.error), now, str(f.error), f.offer)
            elif tok not in placed:
                self.store.fail_intent(tok, now, error_code(f.error), str(f.error))
        report.nodes_placed += outcome.placed_nodes
        if outcome.placed:
            owned = ports.capacity.list_owned(self.controller)
            recent = self.store.intents(kind="scale_up", since_ts=now - self.config.intent_window_s)
            adopt = plan_adoptions(
                owned, self.ctx.records(now), recent, controller=self.controller, now_ts=now
            )
            by_token: dict[str, list[CloudInstance]] = {}
            for a in adopt:
                by_token.setdefault(a.token, []).append(a.instance)
            for token, insts in by_token.items():
                self.store.confirm(token, now, instances=insts)
                report.adopted += len(insts)
            self.ctx.hook(STEP_SCALE_UP_BEFORE_REGISTER)
            self._move_jobs(su.job_ids, pool, jobs, report)
        log.info(
            "scale-up %s: %d of %d node(s) placed (%s)",
            su.pool,
            outcome.placed_nodes,
            su.nodes,
            did,
        )

    def _failed_without_call(
        self, su: ScaleUp, code: str, now: float, error: str = "", offer: OfferKey | None = None
    ) -> None:
        """A scale-up that failed before any resize (no group, no image): kept as a failed
        intent, so the failure is counted and, for capacity/quota, backs the offer off."""
        key = offer or su.offer
        token = request_token(su.decision.decision_id, str(key), "not-sent")
        self.store.record_intent(
            "scale_up",
            token,
            now,
            pool=su.pool,
            offer=key,
            nodes=0,
            decision_id=su.decision.decision_id,
            team=su.decision.team,
            payload={"jobs": list(su.job_ids)},
        )
        self.store.fail_intent(token, now, code, error)

    def _move_jobs(
        self,
        job_ids: Iterable[str],
        pool: PoolPolicy,
        jobs: Mapping[str, Any],
        report: PassReport,
    ) -> None:
        """Let Slurm place burst jobs on the pool's nodes: add the pool's partition."""
        ctl = self.deps.job_control
        if ctl is None:
            return
        self.store.check_fence()
        for jid in job_ids:
            job = jobs.get(jid)
            if job is None or pool.partition in job.partitions:
                continue
            parts = [*job.partitions, pool.partition]
            try:
                ctl.set_partitions(jid, parts)
                report.jobs_moved += 1
                log.info("job %s may now run in %s", jid, ",".join(parts))
            except (ProvisionerError, ValueError) as exc:
                report.errors.append(f"job {jid}: {exc}")

    def _drain(self, dr: Drain, now: float, report: PassReport) -> None:
        si = self.store.instance(dr.instance_id) if dr.instance_id else None
        ctl = self.deps.node_control
        if si is None or si.instance.state is not S.READY or ctl is None:
            return
        reason = f"idle, drained by {self.controller} ({dr.decision.decision_id})"
        self.store.check_fence()
        try:
            ctl.drain_and_power_down(dr.node, reason)
        except ProvisionerError as exc:
            report.errors.append(f"drain {dr.node}: {exc}")
            return
        self.ctx.hook(STEP_DRAIN_AFTER_SLURM)
        self.store.transition(dr.instance_id, S.DRAINING, now, f"idle: {dr.decision.decision_id}")
        report.drained += 1
        log.info("draining %s (%s)", dr.node, dr.instance_id)
