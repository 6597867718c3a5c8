"""Act: the pass's plans carried out, one step per kind of action, in the loop's order.

Each kind of action has one step that carries it out: a scale-up `provisioner.act.scale_up`
(the offer, its fallbacks, the back-off), a termination `provisioner.act.terminate`, a change in
Slurm (moved or released jobs, drains, resumes, failed nodes) `provisioner.register.registrar`.
Here: what sync asks the store alone (adoptions, orphans, bindings, lifecycle steps), the order
the steps are called in, and the pass report their outcomes add up to.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace

from provisioner.act.join_diagnosis import JoinDiagnosis
from provisioner.act.node_identity import NameNodeStep
from provisioner.act.ports import OwnedInstance
from provisioner.act.scale_up import ScaleUpResult, ScaleUpStep
from provisioner.act.terminate import TerminateStep
from provisioner.domain.errors import CloudError, ProvisionerError
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.intents import IntentKind
from provisioner.domain.jobs import Job
from provisioner.domain.plan import Decision, Plan, ReasonCode, ScaleUp, decision_id
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.plan.backoff import Backoff
from provisioner.ports.store import FencedOut
from provisioner.reconcile.context import STEP_SCALE_UP_BEFORE_REGISTER, PassContext, PassReport
from provisioner.reconcile.pool_pause import pause_on_permission_error
from provisioner.reconcile.sync import (
    TERMINABLE,
    Adopt,
    CloudStamps,
    Kill,
    SyncPlan,
    owned_from_record,
    plan_adoptions,
)
from provisioner.register.registrar import SlurmOutcome, SlurmRegistrar

log = logging.getLogger("provisioner.loop")

S = InstanceState


def _add(report: PassReport, *outcomes: SlurmOutcome) -> None:
    for out in outcomes:
        report.errors.extend(out.errors)
        report.jobs_moved += out.jobs_moved
        report.drained += out.drained


class PassActuation:
    """Carries out sync plans and plans, each action through the step for its kind."""

    def __init__(
        self,
        ctx: PassContext,
        scale_ups: ScaleUpStep,
        terminations: TerminateStep,
        slurm: SlurmRegistrar,
        names: NameNodeStep,
    ) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.config = ctx.config
        self.controller = ctx.controller
        self.scale_ups = scale_ups
        self.terminations = terminations
        self.diagnosis = JoinDiagnosis(terminations.clouds)
        self.slurm = slurm
        self.names = names

    @property
    def backoff(self) -> Backoff:
        return self.scale_ups.backoff

    @backoff.setter
    def backoff(self, value: Backoff) -> None:
        self.scale_ups.backoff = value

    # ------------------------------------------------------------------ sync

    def apply_sync(
        self, sp: SyncPlan, now: float, snap: ClusterSnapshot, report: PassReport
    ) -> None:
        self._adopt(sp.adopt, now, report, say=True)
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
        for n in sp.names:
            if n.address:  # slurmctld must talk to this instance before it may join as n.node
                addressed = self.slurm.set_address(n.node, n.address)
                _add(report, addressed)
                if addressed.errors:
                    continue
            err = self.names.name(n.instance, n.node)
            if err:
                report.errors.append(err)
        for mm in sp.mismatches:
            log.error(
                "ALERT slurm node %s answers at %s, not at its instance %s's address %s: draining",
                mm.node,
                mm.found,
                mm.instance_id,
                mm.expected,
            )
            reason = ReasonCode.NODE_ADDRESS_MISMATCH
            detail = {"expected": mm.expected, "found": mm.found, "alert": "true"}
            did = decision_id(now, reason, mm.node)
            alert = Decision(did, reason, node=mm.node, instance=mm.instance_id, detail=detail)
            self.store.record_decisions([alert], now)
        for m in sp.moves:
            try:
                self.store.transition(m.instance_id, m.to, now, m.reason, cloud_ts=m.cloud_ts)
            except FencedOut:
                raise  # no longer the leader: the loop stops the pass, nothing more is tried
            except (ValueError, ProvisionerError, LookupError) as exc:
                report.errors.append(f"move {m.instance_id}: {exc}")
        for fix in sp.nodes:
            _add(report, self.slurm.fix_node(fix.node, fix.action, fix.reason))
        for k in sp.kills:
            reason = (
                ReasonCode.JOIN_TIMEOUT
                if k.join_failure
                else ReasonCode.SPOT_WARNING
                if k.spot_warning
                else ReasonCode.TERMINATE_DRAINED
            )
            did = decision_id(now, reason, k.instance_id)
            detail = {"why": k.reason, "by": "sync"}
            if k.join_failure:
                k = self._explained(k)
                detail["why"] = k.reason
            if k.transition:
                self.store.record_decisions(
                    [Decision(did, reason, instance=k.instance_id, detail=detail)], now
                )
            self._kill(k, did, now, report)

    def apply_signals(self, sp: SyncPlan, report: PassReport) -> list[str]:
        """Drain and signal the nodes of instances warned away; the ids of those done."""
        done: list[str] = []
        for s in sp.signals:
            out = self.slurm.warn_jobs(s.node, s.signal, s.reason)
            _add(report, out)
            if not out.errors:
                done.append(s.instance_id)
        return done

    def _adopt(self, adopt: Iterable[Adopt], now: float, report: PassReport, *, say: bool) -> None:
        by_token: dict[str, list[CloudInstance]] = {}
        for a in adopt:
            by_token.setdefault(a.token, []).append(a.instance)
        for token, insts in by_token.items():
            self.store.confirm(token, now, instances=insts)
            report.adopted += len(insts)
            if say:
                log.info("adopted %s (intent %s)", [i.instance_id for i in insts], token[:8])

    def _explained(self, k: Kill) -> Kill:
        """A join failure's reason, with what the VM's console says about why."""
        why = self.diagnosis.why(k.owned)
        return replace(k, reason=f"{k.reason}: {why}") if why else k

    def _kill(self, k: Kill, did: str, now: float, report: PassReport) -> bool:
        """Terminate one instance, intent first; a node to fail is failed in Slurm first (its
        jobs requeue). False when the cloud call failed."""
        if k.owned.cloud not in self.terminations.clouds:
            report.errors.append(f"terminate {k.instance_id}: no port for {k.owned.cloud}")
            return False
        if k.fail_node:
            _add(report, self.slurm.fix_node(k.fail_node, "fail", k.reason))
        res = self.terminations.terminate(
            k.instance_id, k.owned, k.reason, did, now, transition=k.transition
        )
        if not res.terminated:
            report.errors.append(res.error)
            return False
        report.terminated += 1
        return True

    # ------------------------------------------------------------------ the plan

    def act(
        self,
        plan: Plan,
        view: ClusterSnapshot,
        owned: Mapping[str, OwnedInstance],
        now: float,
        report: PassReport,
    ) -> None:
        """The plan's actions, in order of kind: scale-ups, jobs moved to capacity already bought,
        jobs released after a failed launch, drains, terminations. What Slurm did for the
        first four is added to the report once, before the terminations."""
        jobs = {j.job_id: j for j in view.pending}
        slurm: list[SlurmOutcome] = []
        for su in plan.scale_ups:
            try:
                slurm.extend(self.scale_up(su, jobs, now, report))
            except FencedOut:
                raise  # no longer the leader: the loop stops the pass, nothing more is tried
            except (CloudError, ProvisionerError) as exc:
                report.errors.append(f"scale-up {su.pool}: {exc}")
                log.warning("scale-up for %s failed: %s", su.pool, exc)
        for mv in plan.moves:
            pool = self.ctx.pool(mv.pool)
            if pool is not None:
                slurm.append(self.slurm.move_jobs(mv.job_ids, pool.partition, jobs))
        for rl in plan.releases:
            pool = self.ctx.pool(rl.pool)
            if pool is not None:
                slurm.append(self.slurm.release_jobs(rl.job_ids, pool.partition, jobs))
        slurm.extend(self.slurm.drain(dr, now) for dr in plan.drains)
        _add(report, *slurm)
        for t in plan.terminations:
            si = self.store.instance(t.instance_id) if t.instance_id else None
            if si is None or si.instance.state not in TERMINABLE:
                continue
            inst = si.instance
            join = t.decision.reason is ReasonCode.JOIN_TIMEOUT
            k = Kill(
                inst.instance_id,
                owned.get(t.instance_id) or owned_from_record(inst),
                f"{t.decision.reason}: {t.decision.decision_id}",
                fail_node=inst.node_name if join and inst.node_name else "",
                join_failure=join,
            )
            self._kill(self._explained(k) if join else k, t.decision.decision_id, now, report)

    def scale_up(
        self, su: ScaleUp, jobs: Mapping[str, Job], now: float, report: PassReport
    ) -> list[SlurmOutcome]:
        """The cloud calls, then the instances they launched adopted, then the jobs moved (what
        Slurm did is handed back, for the caller to add to the report)."""
        report.scale_ups += 1
        report.nodes_requested += su.nodes
        res = self.scale_ups.scale_up(su, now)
        report.errors.extend(res.errors)
        if res.outcome is None:
            return []
        report.nodes_placed += res.placed_nodes
        for f in res.outcome.failed:
            pause_on_permission_error(self.store, su.pool, f.offer, f.error, now)
        moved: list[SlurmOutcome] = []
        if res.outcome.placed:
            self._adopt_launched(res, now, report)
            self.ctx.hook(STEP_SCALE_UP_BEFORE_REGISTER)
            if res.pool is not None:
                moved.append(self.slurm.move_jobs(su.job_ids, res.pool.partition, jobs))
        log.info(
            "scale-up %s: %d of %d node(s) placed (%s)",
            su.pool,
            res.placed_nodes,
            su.nodes,
            su.decision.decision_id,
        )
        return moved

    def _adopt_launched(self, res: ScaleUpResult, now: float, report: PassReport) -> None:
        """Record the instances a scale-up launched now, from the cloud's listing, so the
        rest of the pass (and a crash right after) sees them. Their launch stamps are evidence
        of the cloud's clock: launched after this pass began, before this listing."""
        if res.ports is None:
            return
        listed = res.ports.capacity.list_owned(self.controller)
        received = self.ctx.clock_now()
        recent = self.store.intents(
            kind=IntentKind.SCALE_UP, since_ts=now - self.config.intent_window_s
        )
        stamps = CloudStamps(self.ctx.skews.skew_by_cloud(), self.ctx.skews.span_by_cloud())
        adopt = plan_adoptions(
            listed,
            self.ctx.records(now),
            recent,
            controller=self.controller,
            now_ts=now,
            stamps=stamps,
            unknown_floor_ts=now - self.config.terminal_window_s,
        )
        adopted = {a.instance.instance_id for a in adopt}
        for o in listed:
            probe = self.ctx.probes.get(o.cloud)
            if probe is not None and o.instance_id in adopted:
                probe.launched(o.launched_ts, now, received)
        for w in stamps.warnings:
            log.warning("%s", w)
        report.warnings.extend(stamps.warnings)
        self._adopt(adopt, now, report, say=False)
