"""Pure parsers: Slurm's JSON and `scontrol -o` output into domain Jobs and Nodes.

Handles the shapes of Slurm 22.05 (Debian 12, OpenAPI v0.0.38: `tres_per_node: "gres:gpu:2"`,
`job_state: "PENDING"`, node `state: "idle"` + `state_flags: [...]`, epoch integers, `time_limit`
in minutes or null) and of newer releases (23.x/24.x, OpenAPI v0.0.39+: `tres_per_node:
"gres/gpu:2"`, number objects `{"set": true, "infinite": false, "number": N}`, `job_state:
["PENDING"]`, node `state: ["IDLE", "CLOUD", "POWERED_DOWN"]`). No I/O, no clock: the caller
passes `taken_ts`. Anything unreadable raises `SnapshotError` naming the record and field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from provisioner.domain.errors import SnapshotError
from provisioner.domain.gpu_share import NodeShares, ShareRequest, mig_profile_of
from provisioner.domain.hostlist import HostlistError, expand_hostlist
from provisioner.domain.jobs import Job, JobState
from provisioner.domain.naming import pool_of
from provisioner.domain.nodes import Node, NodeKind, NodeState
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.observe.slurm.gpu_shares import node_shares, scaled, split_tres, with_choice

CLOUD_FEATURE = "cloud"
DEFAULT_CLOUD_PARTITIONS: frozenset[str] = frozenset({"cloud"})


@dataclass(frozen=True, slots=True)
class GresItem:
    """One GRES entry: `gpu:a100:4(IDX:0-3)` → name gpu, type a100, count 4."""

    name: str
    type: str
    count: int


@dataclass(frozen=True, slots=True)
class SlurmView:
    """What one read of Slurm returned, before it becomes a snapshot."""

    jobs: tuple[Job, ...]
    nodes: tuple[Node, ...]


# --------------------------------------------------------------------------- small values


def number(value: Any, *, where: str = "") -> float | None:
    """A Slurm number: plain int/float, or a 23.x number object. None when unset or infinite."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise SnapshotError(f"{where}: expected a number, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        return number(value.get("number"), where=where)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise SnapshotError(f"{where}: expected a number, got {value!r}")


def _epoch(value: Any, *, where: str) -> float | None:
    """Epoch seconds; 0 and unset mean unknown."""
    n = number(value, where=where)
    return n if n else None


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def _split_outside_parens(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def parse_gres(spec: str) -> tuple[GresItem, ...]:
    """Parse a node GRES string: `gpu:a100:4`, `gpu:4`, `gpu:a100:4(IDX:0-3)`,
    `gpu:a100:0(IDX:N/A)`, `gpu:a100:2(S:0-1)`, `gpu:a100:4,gpu:v100:2`, `(null)`.
    A name without a count means 1."""
    if not spec or spec in ("(null)", "N/A", "None"):
        return ()
    items: list[GresItem] = []
    for part in _split_outside_parens(spec):
        body = part.split("(", 1)[0].strip()
        if not body:
            continue
        fields = body.split(":")
        name = fields[0]
        gtype = ""
        count = 1
        if len(fields) == 2:
            if fields[1].isdigit():
                count = int(fields[1])
            else:
                gtype = fields[1]
        elif len(fields) >= 3:
            gtype = fields[1]
            if not fields[-1].isdigit():
                raise SnapshotError(f"gres {spec!r}: count {fields[-1]!r} is not a number")
            count = int(fields[-1])
        items.append(GresItem(name=name, type=gtype, count=count))
    return tuple(items)


def gpus_of(items: Iterable[GresItem]) -> tuple[int, str]:
    """Whole GPUs and their type (the first named one) of GRES items: MIG devices are parts
    of GPUs (see gpu_shares.py), not GPUs."""
    total = 0
    gtype = ""
    for it in items:
        if it.name == "gpu" and (not it.type or mig_profile_of(it.type) is None):
            total += it.count
            gtype = gtype or it.type
    return total, gtype


def parse_tres_gpus(spec: str) -> tuple[int, str]:
    """Whole GPUs and their type in a TRES request string, any release's spelling:
    `gres:gpu:2` (22.05), `gres/gpu:2` (23.x), `gres:gpu:a100:2`, `gres/gpu:a100:2`,
    `gres/gpu=2`, `gres/gpu:a100=2`, `cpu=1,mem=1000M,gres/gpu=4`. Typed and untyped entries for
    the same request (`gres/gpu=2,gres/gpu:a100=2`) are not double-counted; MIG devices and
    shards are parts of GPUs (split_tres)."""
    whole, gtype, _ = split_tres(spec)
    return whole, gtype


# --------------------------------------------------------------------------- jobs

_JOB_STATES: dict[str, JobState] = {
    "PENDING": JobState.PENDING,
    "REQUEUED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING,
    "RESV_DEL_HOLD": JobState.PENDING,
    "SPECIAL_EXIT": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "CONFIGURING": JobState.RUNNING,  # holds its nodes while they power up
    "COMPLETING": JobState.RUNNING,  # still holds its GPUs
    "SUSPENDED": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "RESIZING": JobState.RUNNING,
    "COMPLETED": JobState.COMPLETED,
    "CANCELLED": JobState.CANCELLED,
    "FAILED": JobState.FAILED,
    "TIMEOUT": JobState.FAILED,
    "NODE_FAIL": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED,
    "DEADLINE": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED,
    "PREEMPTED": JobState.FAILED,
    "REVOKED": JobState.CANCELLED,
}
# When 23.x lists several states, a flag like CONFIGURING or COMPLETING wins over the base.
_JOB_FLAG_ORDER = ("REQUEUED", "REQUEUE_HOLD", "CONFIGURING", "COMPLETING")


def _upper_words(raw: Any) -> set[str]:
    return {str(w).upper() for w in _words(raw)}


def _job_state(raw: Any, where: str) -> JobState:
    words = _words(raw)
    if not words:
        raise SnapshotError(f"{where}: job_state missing or empty ({raw!r})")
    upper = [str(w).upper() for w in words]
    for flag in _JOB_FLAG_ORDER:
        if flag in upper:
            return _JOB_STATES[flag]
    for w in upper:
        if w in _JOB_STATES:
            return _JOB_STATES[w]
    raise SnapshotError(f"{where}: unknown job_state {raw!r}")


def _job_gpus(rec: Mapping[str, Any], nnodes: int) -> tuple[int, str, ShareRequest | None]:
    """Whole GPUs, their type, and any parts of GPUs the job asks for, over all its nodes."""
    per_node, gtype, share = split_tres(_text(rec.get("tres_per_node")))
    if per_node or share:
        times = max(1, nnodes)
        return per_node * times, gtype, scaled(share, times)
    per_job, gtype, share = split_tres(_text(rec.get("tres_per_job")))
    if per_job or share:
        return per_job, gtype, share
    per_task, gtype, share = split_tres(_text(rec.get("tres_per_task")))
    if per_task or share:
        tasks = int(number(rec.get("tasks"), where="tasks") or 1.0)
        return per_task * tasks, gtype, scaled(share, tasks)
    # a running job's allocation, then the request string
    alloc, gtype, share = split_tres(_text(rec.get("tres_alloc_str")))
    if alloc or share:
        return alloc, gtype, share
    return split_tres(_text(rec.get("tres_req_str")))


def parse_job(rec: Mapping[str, Any]) -> Job:
    """One record of `squeue --json` `jobs[]` (or slurmrestd `/jobs`)."""
    if not isinstance(rec, Mapping):
        raise SnapshotError(f"job record is {type(rec).__name__}, expected an object")
    raw_id = rec.get("job_id")
    if raw_id is None:
        raise SnapshotError("job record without job_id")
    jid = number(raw_id, where="job_id")
    if jid is None:
        raise SnapshotError(f"job record with unset job_id {raw_id!r}")
    where = f"job {int(jid)}"
    array_task = number(rec.get("array_task_id"), where=f"{where}: array_task_id")
    array_job = number(rec.get("array_job_id"), where=f"{where}: array_job_id")
    job_id = (
        f"{int(array_job)}_{int(array_task)}"
        if array_task is not None and array_job
        else str(int(jid))
    )
    where = f"job {job_id}"
    state = _job_state(rec.get("job_state"), where)
    submit = _epoch(rec.get("submit_time"), where=f"{where}: submit_time")
    if submit is None:
        raise SnapshotError(f"{where}: submit_time missing")
    try:
        nodes = expand_hostlist(_text(rec.get("nodes"))) if state is not JobState.PENDING else ()
    except HostlistError as exc:
        raise SnapshotError(f"{where}: nodes: {exc}") from None
    nnodes = int(number(rec.get("node_count"), where=f"{where}: node_count") or 0) or len(nodes)
    gpus, gtype, share = _job_gpus(rec, nnodes or 1)
    gpus, share = with_choice(gpus, gtype, share, _text(rec.get("features")))
    limit_min = number(rec.get("time_limit"), where=f"{where}: time_limit")
    start = _epoch(rec.get("start_time"), where=f"{where}: start_time")
    end = _epoch(rec.get("end_time"), where=f"{where}: end_time")
    started = state is not JobState.PENDING
    finished = state in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)
    eligible = _epoch(rec.get("eligible_time"), where=f"{where}: eligible_time")
    return Job(
        job_id=job_id,
        gpus=gpus,
        submit_ts=submit,
        partition=_text(rec.get("partition")),
        account=_text(rec.get("account")),
        user=_text(rec.get("user_name")),
        qos=_text(rec.get("qos")),
        gpu_type=gtype,
        share=share,
        time_limit_s=limit_min * 60.0 if limit_min is not None else None,
        state=state,
        start_ts=start if started else None,
        end_ts=end if finished else None,
        nodes=nodes,
        eligible_ts=eligible if not started else None,
        held=not started and _held(rec),
        launch_failed=not started and _launch_failed(rec),
        configuring=state is JobState.RUNNING
        and "CONFIGURING" in _upper_words(rec.get("job_state")),
    )


# Pending reasons of a job Slurm will not start until someone releases it (a user or admin
# hold, or a requeue after a failed launch, which Slurm holds).
_HELD_REASONS = frozenset({"JOBHELDUSER", "JOBHELDADMIN"})


def _held(rec: Mapping[str, Any]) -> bool:
    reason = _text(rec.get("state_reason")).strip()
    if reason.upper() in _HELD_REASONS or reason.lower().endswith("requeued held"):
        return True
    return "REQUEUE_HOLD" in {w.upper() for w in _words(rec.get("job_state"))}


def _launch_failed(rec: Mapping[str, Any]) -> bool:
    """Held after a failed launch. 22.05's squeue --json says `state_reason: JobHeldUser` with
    `state_description: "launch failed requeued held"`; scontrol spells the reason
    `launch_failed_requeued_held`."""
    text = f"{_text(rec.get('state_reason'))} {_text(rec.get('state_description'))}"
    return "launch failed requeued held" in text.lower().replace("_", " ")


def _words(raw: Any) -> list[str]:
    if isinstance(raw, str):
        return [raw]
    return [str(w) for w in raw] if isinstance(raw, list) else []


def parse_jobs(doc: Mapping[str, Any], *, source: str = "squeue --json") -> tuple[Job, ...]:
    """The `jobs` of a `squeue --json` or slurmrestd `/jobs` document."""
    check_errors(doc, source)
    jobs = doc.get("jobs")
    if not isinstance(jobs, list):
        raise SnapshotError(f"{source}: no 'jobs' list in the document")
    out: list[Job] = []
    for i, rec in enumerate(jobs):
        try:
            out.append(parse_job(rec))
        except SnapshotError as exc:
            raise SnapshotError(f"{source}: jobs[{i}]: {exc}") from None
    return tuple(out)


# --------------------------------------------------------------------------- nodes

# In precedence order: a base state wins over COMPLETING, which is a flag in 22.05.
_BASE_STATES = {
    "DOWN": NodeState.DOWN,
    "ERROR": NodeState.DOWN,
    "FUTURE": NodeState.DOWN,
    "ALLOCATED": NodeState.ALLOCATED,
    "ALLOC": NodeState.ALLOCATED,
    "MIXED": NodeState.MIXED,
    "IDLE": NodeState.IDLE,
    "COMPLETING": NodeState.ALLOCATED,
    "UNKNOWN": NodeState.UNKNOWN,
}


def map_node_state(words: Collection[str]) -> NodeState:
    """Slurm's base state plus flags (any case, e.g. {"IDLE", "CLOUD", "POWERED_DOWN"}) → NodeState.

    Precedence: failed (DOWN/ERROR/FUTURE, NOT_RESPONDING unless powered down) → power-saving
    transitions → drain → base state. A drained node still running jobs is DRAINING (so is a
    node waiting to power down after its jobs, `power_down_asap`).
    """
    w = {s.upper().replace("-", "_") for s in words}
    base = next((_BASE_STATES[s] for s in _BASE_STATES if s in w), NodeState.UNKNOWN)
    busy = base in (NodeState.MIXED, NodeState.ALLOCATED) or "COMPLETING" in w
    if base is NodeState.DOWN or ("FAIL" in w and not busy):
        return NodeState.DOWN
    if "POWERED_DOWN" in w:
        return NodeState.POWERED_DOWN
    if "POWERING_DOWN" in w:
        return NodeState.POWERING_DOWN
    if "POWER_DOWN" in w:  # requested (power_down_asap): drains first
        return NodeState.DRAINING if busy else NodeState.POWERING_DOWN
    if "NOT_RESPONDING" in w and "POWERING_UP" not in w and "POWER_UP" not in w:
        return NodeState.DOWN
    if "POWERING_UP" in w or "POWER_UP" in w:
        return NodeState.POWERING_UP
    if w & {"DRAIN", "DRAINING", "DRAINED", "FAIL"}:
        return NodeState.DRAINING if busy else NodeState.DRAINED
    return base


def _node_kind(
    features: Sequence[str],
    flags: Collection[str],
    partitions: Sequence[str],
    cloud_partitions: Collection[str],
) -> NodeKind:
    if CLOUD_FEATURE in features or "CLOUD" in flags:
        return NodeKind.BURST
    if partitions and all(p in cloud_partitions for p in partitions):
        return NodeKind.BURST
    return NodeKind.ONPREM


def _build_node(
    name: str,
    flags: Collection[str],
    *,
    gpus: int,
    gpu_type: str,
    used: int,
    partitions: tuple[str, ...],
    features: tuple[str, ...],
    weight: int,
    last_busy: float | None,
    cloud_partitions: Collection[str],
    address: str = "",
    reason: str = "",
    shares: NodeShares | None = None,
) -> Node:
    """The Node both readers (JSON and `scontrol -o`) build from the fields they extracted."""
    state = map_node_state(flags)
    kind = _node_kind(features, flags, partitions, cloud_partitions)
    return Node(
        name=name,
        kind=kind,
        pool=pool_of(name) if kind is NodeKind.BURST else "",
        gpus=gpus,
        gpus_alloc=min(used, gpus) if gpus else used,
        gpu_type=gpu_type,
        state=state,
        partitions=partitions,
        features=features,
        weight=weight,
        idle_since_ts=last_busy if state is NodeState.IDLE else None,
        address=address,
        reason=reason,
        shares=shares,
    )


def _features(raw: Any) -> tuple[str, ...]:
    return tuple(f.strip() for f in _text(raw).split(",") if f.strip() and f != "(null)")


def parse_node(
    rec: Mapping[str, Any],
    *,
    cloud_partitions: Collection[str] = DEFAULT_CLOUD_PARTITIONS,
) -> Node:
    """One record of `sinfo --json` `nodes[]` (or slurmrestd `/nodes`)."""
    if not isinstance(rec, Mapping):
        raise SnapshotError(f"node record is {type(rec).__name__}, expected an object")
    name = rec.get("name")
    if not isinstance(name, str) or not name:
        raise SnapshotError("node record without a name")
    where = f"node {name}"
    raw_state = rec.get("state")
    if isinstance(raw_state, str):
        words = [raw_state, *(_text(f) for f in rec.get("state_flags") or [])]
    elif isinstance(raw_state, list):
        words = [str(s) for s in raw_state]
    else:
        raise SnapshotError(f"{where}: state missing ({raw_state!r})")
    flags = {s.upper() for s in words}
    gres, gres_used = _text(rec.get("gres")), _text(rec.get("gres_used"))
    gpus, gtype = gpus_of(parse_gres(gres))
    used, _ = gpus_of(parse_gres(gres_used))
    partitions = tuple(_text(p) for p in rec.get("partitions") or [])
    features = _features(rec.get("active_features") or rec.get("features"))
    weight = number(rec.get("weight"), where=f"{where}: weight")
    last_busy = _epoch(rec.get("last_busy"), where=f"{where}: last_busy")
    address = _text(rec.get("address"))
    return _build_node(
        name,
        flags,
        gpus=gpus,
        gpu_type=gtype,
        used=used,
        partitions=partitions,
        features=features,
        weight=int(weight) if weight is not None else 1,
        last_busy=last_busy,
        cloud_partitions=cloud_partitions,
        address=address,
        reason=node_reason(_text(rec.get("reason"))),
        shares=node_shares(gres, gres_used),
    )


def parse_nodes(
    doc: Mapping[str, Any],
    *,
    source: str = "sinfo --json",
    cloud_partitions: Collection[str] = DEFAULT_CLOUD_PARTITIONS,
) -> tuple[Node, ...]:
    """The `nodes` of a `sinfo --json` or slurmrestd `/nodes` document.

    sinfo prints a node once per partition it belongs to in some releases: records are merged
    by name, partitions united."""
    check_errors(doc, source)
    recs = doc.get("nodes")
    if not isinstance(recs, list):
        raise SnapshotError(f"{source}: no 'nodes' list in the document")
    by_name: dict[str, Node] = {}
    for i, rec in enumerate(recs):
        # 24.x sinfo --json nests nodes under `sinfo[].nodes.nodes` (names only): not handled
        try:
            node = parse_node(rec, cloud_partitions=cloud_partitions)
        except SnapshotError as exc:
            raise SnapshotError(f"{source}: nodes[{i}]: {exc}") from None
        prev = by_name.get(node.name)
        if prev is not None:
            parts = tuple(dict.fromkeys((*prev.partitions, *node.partitions)))
            node = replace(node, partitions=parts)
        by_name[node.name] = node
    return tuple(by_name.values())


# --------------------------------------------------------------------------- scontrol -o


def _kv_line(line: str) -> dict[str, str]:
    """`Key=Value Key2=Value with spaces Key3=...` → dict.

    Values may contain spaces (OS=, Reason=)."""
    out: dict[str, str] = {}
    key = None
    for tok in line.split(" "):
        if not tok:
            continue
        k, sep, v = tok.partition("=")
        if sep and k and (k[0].isupper() or k[0].isdigit()) and " " not in k:
            key = k
            out[key] = v
        elif key is not None:
            out[key] += " " + tok
    return out


def node_reason(text: str) -> str:
    """Slurm's node Reason without the `[user@time]` scontrol appends ("" for none)."""
    text = re.sub(r"\s*\[[^\]]*@[^\]]*\]\s*$", "", text.strip())
    return "" if text in ("(null)", "none", "None") else text


def _scontrol_time(value: str) -> float | None:
    """scontrol prints local time `2026-11-30T07:06:54`, or None/Unknown/n/a."""
    if not value or value in ("None", "Unknown", "n/a", "N/A", "(null)"):
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def parse_scontrol_nodes(
    text: str, *, cloud_partitions: Collection[str] = DEFAULT_CLOUD_PARTITIONS
) -> tuple[Node, ...]:
    """`scontrol -o [-d] show node` output: one node per line. With `-d` the line carries
    `GresUsed=gpu:a100:2(IDX:0-1)`; without it GPUs allocated come from `AllocTRES` when the
    cluster tracks `gres/gpu`, else 0."""
    nodes: list[Node] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        kv = _kv_line(line)
        name = kv.get("NodeName")
        if not name:
            raise SnapshotError(f"scontrol show node: line {lineno}: no NodeName= ({line[:60]!r})")
        if "State" not in kv:
            raise SnapshotError(f"scontrol show node: node {name}: no State=")
        words = [w.rstrip("*") for w in kv["State"].split("+")]
        if kv["State"].endswith("*"):
            words.append("NOT_RESPONDING")
        flags = {w.upper() for w in words}
        gpus, gtype = gpus_of(parse_gres(kv.get("Gres", "")))
        if "GresUsed" in kv:
            used, _ = gpus_of(parse_gres(kv["GresUsed"]))
        else:
            used, _ = parse_tres_gpus(kv.get("AllocTRES", ""))
        partitions = tuple(p for p in kv.get("Partitions", "").split(",") if p)
        features = _features(kv.get("ActiveFeatures") or kv.get("AvailableFeatures"))
        try:
            weight = int(kv.get("Weight", "1"))
        except ValueError:
            bad = kv["Weight"]
            raise SnapshotError(f"scontrol show node: node {name}: Weight={bad!r}") from None
        nodes.append(
            _build_node(
                name,
                flags,
                gpus=gpus,
                gpu_type=gtype,
                used=used,
                partitions=partitions,
                features=features,
                weight=weight,
                last_busy=_scontrol_time(kv.get("LastBusyTime", "")),
                cloud_partitions=cloud_partitions,
                address=kv.get("NodeAddr", "").strip(),
                reason=node_reason(kv.get("Reason", "")),
                shares=node_shares(kv.get("Gres", ""), kv.get("GresUsed", "")),
            )
        )
    return tuple(nodes)


# --------------------------------------------------------------------------- documents


def check_errors(doc: Any, source: str) -> None:
    """Raise SnapshotError when a Slurm JSON document is not an object or carries `errors`."""
    if not isinstance(doc, Mapping):
        raise SnapshotError(f"{source}: expected a JSON object, got {type(doc).__name__}")
    errors = doc.get("errors")
    if errors:
        first = errors[0] if isinstance(errors, list) else errors
        if isinstance(first, Mapping):
            msg = first.get("description") or first.get("error") or json.dumps(first)
        else:
            msg = str(first)
        raise SnapshotError(f"{source}: Slurm reported an error: {msg}")


def load_json(text: str | bytes, *, source: str) -> Mapping[str, Any]:
    """json.loads with a SnapshotError that says where: truncated or garbled output is common."""
    if not text or not text.strip():
        raise SnapshotError(f"{source}: empty output")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SnapshotError(
            f"{source}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    if not isinstance(doc, Mapping):
        raise SnapshotError(f"{source}: expected a JSON object, got {type(doc).__name__}")
    return doc


def snapshot_from(view: SlurmView, taken_ts: float) -> ClusterSnapshot:
    return ClusterSnapshot(taken_ts=taken_ts, jobs=view.jobs, nodes=view.nodes)


def parse_snapshot(
    squeue_json: str | bytes,
    sinfo_json: str | bytes,
    taken_ts: float,
    *,
    cloud_partitions: Collection[str] = DEFAULT_CLOUD_PARTITIONS,
) -> ClusterSnapshot:
    """`squeue --json` and `sinfo --json` output → a fresh ClusterSnapshot.

    Raises SnapshotError."""
    jobs = parse_jobs(load_json(squeue_json, source="squeue --json"))
    nodes = parse_nodes(
        load_json(sinfo_json, source="sinfo --json"), cloud_partitions=cloud_partitions
    )
    return snapshot_from(SlurmView(jobs=jobs, nodes=nodes), taken_ts)
