"""Decision reasons in words, for the console and the terminal reports (a rendering only:
the reason codes stay the record)."""

from __future__ import annotations

from provisioner.domain.plan import ReasonCode

REASON_WORDS: dict[str, str] = {
    ReasonCode.BURST_WAIT_EXCEEDS_BUDGET: "Burst: the predicted on-prem wait is longer than "
    "the job's waiting budget",
    ReasonCode.BURST_URGENT: "Burst: the job is urgent",
    ReasonCode.WAIT_WITHIN_BUDGET: "Wait: on-prem will start it within its waiting budget",
    ReasonCode.WAIT_FASTER_THAN_BOOT: "Wait: on-prem frees up before a cloud node could boot",
    ReasonCode.WAIT_NOT_ELIGIBLE: "Wait: Slurm holds the job or will not start it yet",
    ReasonCode.WAIT_UNCERTAIN_RUNTIME: "Wait: the predicted wait rests on an uncertain runtime; "
    "wait and see before bursting",
    ReasonCode.COVERED_BY_INFLIGHT: "Wait: capacity already requested covers it",
    ReasonCode.BLOCKED_NO_OFFER: "Blocked: no cloud offer fits the job",
    ReasonCode.BLOCKED_POOL_MAX: "Blocked: the pool is at its maximum size",
    ReasonCode.BLOCKED_BACKOFF: "Blocked: the offer is backing off after a capacity error",
    ReasonCode.BLOCKED_GLOBAL_BUDGET: "Blocked: the global $/h cap would be exceeded",
    ReasonCode.BLOCKED_TEAM_BUDGET: "Blocked: the team's monthly budget would be exceeded",
    ReasonCode.BLOCKED_STALE_SNAPSHOT: "Blocked: the cluster view is stale",
    ReasonCode.BLOCKED_PAUSED: "Blocked: bursting is paused by an operator",
    ReasonCode.SCALE_DOWN_IDLE: "Scale down: the node is idle",
    ReasonCode.TERMINATE_DRAINED: "Terminate: the node is drained",
    ReasonCode.KEEP_GPU_BUSY: "Keep: the node's GPUs are busy",
    ReasonCode.JOIN_TIMEOUT: "Give up: the node did not join Slurm in time",
    ReasonCode.RELEASE_LAUNCH_FAILED: "Release: Slurm held the job after a failed launch; "
    "it goes back to the queue in a burst partition",
    ReasonCode.NODE_ADDRESS_MISMATCH: "Alert: a node answers away from its instance; it is drained",
    ReasonCode.LAUNCH_FAILED: "Launch failed: the cloud gave up on nodes it was asked for; "
    "the group keeps what it holds and the offer backs off",
    ReasonCode.POOL_PAUSED: "Alert: the cloud denied a permission; the pool takes no new nodes "
    "until an operator grants it and undrains the pool",
    ReasonCode.SPOT_WARNING: "Spot warning: the cloud takes the VM away; its jobs were "
    "signalled and requeued, and the instance ended inside the warning",
    ReasonCode.POLICY_SELECTION: "Policy: the waiting policy, chosen from a replay of the "
    "site's recent past",
    ReasonCode.WAIT_GPU_SHARE: "Wait: the job asks for parts of GPUs (MIG devices or shards); "
    "on-prem ones start it within its budget, or no MIG pool offers them",
}


def reason_words(code: str) -> str:
    return REASON_WORDS.get(code, code.replace("_", " "))


def kind_of_reason(code: str) -> str:
    head = code.split("_", 1)[0]
    return {"burst": "burst", "wait": "wait", "covered": "wait", "blocked": "block"}.get(
        head, "other"
    )
