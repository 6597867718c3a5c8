"""`provisioner doctor`: a preflight, in the spirit of `sky check`, that `provisioner run` also
runs before its first pass. Each check has a verdict (ok, warn, fail, skip), what it found, and
how to fix it. A failing mandatory check stops the start: no instance is ever bought for a pool
that Slurm cannot use (a pool with `partition: clod` launched a $7/h instance that then sat
unused and billed until the unbound timeout).

Checks: Slurm reachable (and its version); every pool's partition, its CLOUD nodes
(`<pool>-<n>`) in that partition with the pool's cloud among their features; the power-saving
hooks; cloud credentials and endpoints (one owned-instances listing per cloud), and each cloud's
clock against this host's, from the `Date` headers of those answers (warn past a minute); catalog
offers
for every pool; budgets and caps consistent; the store reachable and migrated; the API port free;
and the field preflight (doctor/field.py): configless, srun's ports, `controller_host`, and per
pool its image, placement, network rules, role and munge key against the cloud's own API.
Doctor writes nothing: the store is only read, and a store that does not exist is not created.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from provisioner.act.clock_probe import SkewProbe, watch_clouds
from provisioner.act.ports import CloudPorts
from provisioner.clock import Clock, SystemClock
from provisioner.command_runner import CommandRunner, CommandTimeout
from provisioner.config.models import Policy, PoolPolicy
from provisioner.doctor.field import Resolver, field_checks, slurm_config, system_resolver
from provisioner.domain.checks import Check
from provisioner.domain.cloud_clock import WARN_SKEW_S, SkewTracker
from provisioner.domain.errors import ProvisionerError
from provisioner.domain.offers import CapacityType
from provisioner.plan.catalog import Catalog
from provisioner.plan.offers import offers_for

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from provisioner.bootstrap import Settings

_KV = re.compile(r"(\w+)=(\S*)")


class DoctorFailed(ProvisionerError):
    """A mandatory preflight check failed; the message lists every failure, one per line."""


def _records(text: str) -> list[dict[str, str]]:
    """`scontrol -o show ...` lines as key=value dicts."""
    return [dict(_KV.findall(line)) for line in text.splitlines() if "=" in line]


class SlurmFacts:
    """What the checks need from `scontrol`, read once."""

    def __init__(self, runner: CommandRunner, timeout_s: float = 10.0) -> None:
        self.runner = runner
        self.timeout_s = timeout_s
        self._config: tuple[bool, str] | None = None

    def run(self, *argv: str) -> tuple[bool, str]:
        try:
            res = self.runner.run(list(argv), timeout_s=self.timeout_s)
        except CommandTimeout as exc:
            return False, str(exc)
        except OSError as exc:
            return False, f"`{' '.join(argv)}` could not run: {exc}"
        if not res.ok:
            return False, res.describe()
        return True, res.stdout

    def config(self) -> tuple[bool, str]:
        """`scontrol show config`, asked once: the hooks and the field checks both read it."""
        if self._config is None:
            self._config = self.run("scontrol", "show", "config")
        return self._config


def slurm_checks(facts: SlurmFacts, policy: Policy) -> list[Check]:
    ok, out = facts.run("scontrol", "ping")
    text = " ".join(out.split())
    if not ok or "DOWN" in text or " UP" not in text:
        return [
            Check(
                "slurm",
                "fail",
                f"slurmctld unreachable: {text or out}",
                "start slurmctld, or point SLURM_CONF / PROVISIONER_SLURM_CONF at the cluster",
            )
        ]
    _, version = facts.run("scontrol", "--version")
    out_checks = [Check("slurm", "ok", f"{version.strip() or 'slurm'}; {text}")]
    ok_p, parts_text = facts.run("scontrol", "-o", "show", "partition")
    ok_n, nodes_text = facts.run("scontrol", "-o", "show", "node")
    if not (ok_p and ok_n):
        why = parts_text if not ok_p else nodes_text
        return [*out_checks, Check("slurm partitions and nodes", "fail", why)]
    partitions = {r.get("PartitionName", "") for r in _records(parts_text)}
    nodes = {r.get("NodeName", ""): r for r in _records(nodes_text)}
    for pool in policy.pools:
        out_checks.append(pool_check(pool, partitions, nodes))
    out_checks.append(hooks_check(facts))
    return out_checks


def pool_check(
    pool: PoolPolicy, partitions: Iterable[str], nodes: Mapping[str, Mapping[str, str]]
) -> Check:
    name = f"pool {pool.name}"
    parts = set(partitions)
    if pool.partition not in parts:
        return Check(
            name,
            "fail",
            f"partition {pool.partition!r} does not exist in Slurm "
            f"(it has: {', '.join(sorted(parts)) or 'none'})",
            f"fix `partition:` of pool {pool.name} in pools.yaml, or add the partition to "
            "slurm.conf",
        )
    own = {n: r for n, r in nodes.items() if re.fullmatch(re.escape(pool.name) + r"-\d+", n)}
    if not own:
        return Check(
            name,
            "fail",
            f"no Slurm node is named {pool.name}-<n>",
            f"declare CLOUD nodes {pool.name}-[1-{max(pool.max_nodes, 1)}] in slurm.conf "
            "(State=CLOUD, in the pool's partition)",
        )
    problems: list[str] = []
    for n, r in sorted(own.items()):
        if "CLOUD" not in r.get("State", ""):
            problems.append(f"{n} is not a CLOUD node (State={r.get('State', '?')})")
        if pool.partition not in r.get("Partitions", "").split(","):
            problems.append(f"{n} is not in partition {pool.partition!r}")
        feats = set(r.get("AvailableFeatures", r.get("Features", "")).split(","))
        if pool.cloud not in feats:
            problems.append(f"{n} lacks feature {pool.cloud!r}")
    if problems:
        return Check(
            name,
            "fail",
            "; ".join(problems[:4]) + (" ..." if len(problems) > 4 else ""),
            "declare the pool's nodes State=CLOUD with Feature=<cloud>,... in its partition",
        )
    short = f" ({len(own)} < max_nodes {pool.max_nodes})" if len(own) < pool.max_nodes else ""
    return Check(
        name,
        "warn" if short else "ok",
        f"partition {pool.partition}, {len(own)} CLOUD node(s){short}",
        f"declare {pool.max_nodes} nodes or lower max_nodes" if short else "",
    )


def hooks_check(facts: SlurmFacts) -> Check:
    ok, text = facts.config()
    if not ok:
        return Check("slurm power-saving hooks", "warn", text)
    conf = slurm_config(text)
    missing = [k for k in ("ResumeProgram", "SuspendProgram") if conf.get(k, "(null)") == "(null)"]
    if missing:
        return Check(
            "slurm power-saving hooks",
            "warn",
            f"{' and '.join(missing)} not set: Slurm cannot ask for nodes itself",
            "set ResumeProgram/SuspendProgram to `provisioner slurm resume|suspend` wrappers",
        )
    return Check(
        "slurm power-saving hooks",
        "ok",
        f"ResumeProgram={conf['ResumeProgram']}, SuspendProgram={conf['SuspendProgram']}",
    )


def catalog_checks(policy: Policy, catalog: Catalog) -> list[Check]:
    out: list[Check] = []
    caps = list(CapacityType)
    for pool in policy.pools:
        model = pool.gpu_model or policy.onprem.gpu_model
        cands = offers_for(
            1, model, [pool], catalog, caps, policy.spot, policy.onprem.equivalent_gpu_models
        )
        name = f"catalog for pool {pool.name}"
        if not cands:
            out.append(
                Check(
                    name,
                    "fail",
                    f"no offer of {model} in {pool.cloud} {', '.join(pool.regions)}"
                    + (f" among {', '.join(pool.instance_types)}" if pool.instance_types else ""),
                    "fix the pool's gpu_model, regions or instance_types, or the catalog",
                )
            )
            continue
        cheapest = min(c.usd_hr_per_node for c in cands)
        cap = policy.budgets.global_usd_per_hour
        if cap is not None and cheapest > cap:
            out.append(
                Check(
                    name,
                    "fail",
                    f"cheapest node ${cheapest}/h is above the global cap ${cap}/h: "
                    "the pool can never burst",
                    "raise budgets.global_usd_per_hour or choose cheaper offers",
                )
            )
            continue
        out.append(Check(name, "ok", f"{len(cands)} offer(s), from ${cheapest}/h a node"))
    return out


def budget_checks(policy: Policy) -> list[Check]:
    b = policy.budgets
    problems: list[str] = []
    for pool in policy.pools:
        if pool.team and b.teams and pool.team not in b.teams:
            problems.append(f"pool {pool.name} charges team {pool.team!r}, which has no budget")
    unknown = sorted({t for t in b.team_of_account.values() if b.teams and t not in b.teams})
    if unknown:
        problems.append(f"accounts map to teams without a budget: {', '.join(unknown)}")
    if problems:
        return [
            Check(
                "budgets",
                "warn",
                "; ".join(problems),
                "add the teams to budgets.yaml (or leave them uncapped on purpose)",
            )
        ]
    cap = f"global ${b.global_usd_per_hour}/h" if b.global_usd_per_hour is not None else "no cap"
    return [Check("budgets", "ok", f"{cap}, {len(b.teams)} team budget(s)")]


def idle_release_check(policy: Policy) -> Check:
    """With require_nvml_idle, an idle burst node goes only on its agent's word: VMs that run
    no agent would be kept, and billed, until an operator ends them."""
    clouds = [p.name for p in policy.pools if p.cloud in ("aws", "gcp")]
    name = "burst nodes' idle release"
    if not clouds or not policy.guardrails.require_nvml_idle:
        return Check(name, "ok", "on Slurm's word (require_nvml_idle is off)")
    if policy.node.agent_wheels:
        where = policy.node.agent_wheels
        return Check(name, "ok", f"on NVML's word: VMs install the agent from {where}")
    return Check(
        name,
        "warn",
        f"require_nvml_idle is on, but the VMs of {', '.join(clouds)} run no GPU agent: "
        "their idle nodes would never be released",
        "set node.agent_wheels (and node.controller_api) so burst VMs install the agent, "
        "or set guardrails.require_nvml_idle: false",
    )


def store_check(url: str) -> Check:
    """The store reachable, and at which migration, read without writing anything: a SQLite
    file that does not exist yet is not created (`provisioner run` creates and migrates it), and
    one that exists is opened read-only."""
    from sqlalchemy.engine import make_url

    from provisioner.store import make_engine, migrations

    u = make_url(url)
    shown = u.render_as_string(hide_password=True)
    head = migrations.head_revision()
    db = u.database or ""
    sqlite_file = u.get_backend_name() == "sqlite" and db not in ("", ":memory:")
    sqlite_file = sqlite_file and not db.startswith("file:")  # a URI: SQLite's own options
    if sqlite_file and not Path(db).exists():
        return _new_sqlite_check(shown, Path(db), head)
    try:
        engine = _read_only_sqlite(Path(db)) if sqlite_file else make_engine(url)
        try:
            with engine.connect() as conn:
                current = migrations.current_revision(conn)
        finally:
            engine.dispose()
    except Exception as exc:  # any driver error: the verdict carries it
        return Check(
            "store",
            "fail",
            f"{shown}: {type(exc).__name__}: {exc}"[:300],
            "check PROVISIONER_STORE_URL and that the database is up",
        )
    if current is None:
        return Check("store", "ok", f"{shown}: new, will be migrated to {head}")
    if current != head:
        return Check("store", "ok", f"{shown}: at {current}, will be migrated to {head}")
    return Check("store", "ok", f"{shown}: migrated ({head})")


# Listed with when no identity is claimed yet (the first `provisioner run` claims one): a
# valid tag that owns nothing, so the listing still proves the cloud reachable.
UNCLAIMED = "burst-unclaimed"


def stored_controller(url: str) -> str:
    """The controller identity the store holds, read without writing anything ("" when it
    holds none yet, or is not there or not migrated that far: `store_check` says which)."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    from provisioner.store import make_engine

    u = make_url(url)
    db = u.database or ""
    sqlite_file = u.get_backend_name() == "sqlite" and db not in ("", ":memory:")
    sqlite_file = sqlite_file and not db.startswith("file:")
    if sqlite_file and not Path(db).exists():
        return ""
    try:
        engine = _read_only_sqlite(Path(db)) if sqlite_file else make_engine(url)
        try:
            with engine.connect() as conn:
                row = conn.execute(
                    text("SELECT controller_id FROM operator_state WHERE id = 1")
                ).first()
        finally:
            engine.dispose()
    except Exception:  # no such table or column yet, or no database: nothing claimed
        return ""
    return str(row[0]) if row is not None and row[0] else ""


def _new_sqlite_check(shown: str, path: Path, head: str) -> Check:
    """A SQLite store that does not exist yet: can `provisioner run` create it there?"""
    folder = path.parent
    if not folder.is_dir():
        return Check(
            "store",
            "fail",
            f"{shown}: folder {folder} does not exist",
            "create the folder, or point PROVISIONER_STORE_URL (--store) elsewhere",
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        return Check(
            "store",
            "fail",
            f"{shown}: folder {folder} is not writable: the store cannot be created there",
            "point PROVISIONER_STORE_URL (--store) at a writable folder",
        )
    return Check(
        "store",
        "ok",
        f"{shown}: does not exist yet; `provisioner run` will create it, migrated to {head}",
    )


def _read_only_sqlite(path: Path) -> Engine:
    """An engine that reads an existing SQLite file and writes nothing. SQLite's `mode=ro`
    still creates the -wal and -shm files of a WAL database when they are missing, so a file
    that no one has open (no -wal beside it: its content is all in the file) is opened
    `immutable`; one in use is opened `mode=ro`, through the -wal and -shm already there."""
    import sqlite3

    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    in_use = all(path.with_name(path.name + ext).exists() for ext in ("-wal", "-shm"))
    uri = f"{path.resolve().as_uri()}?{'mode=ro' if in_use else 'immutable=1'}"
    return create_engine(
        "sqlite://",
        creator=lambda: sqlite3.connect(uri, uri=True, check_same_thread=False),
        poolclass=NullPool,
    )


def port_check(host: str, port: int) -> Check:
    if port == 0:
        return Check("api port", "ok", f"{host}: any free port")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            return Check(
                "api port",
                "fail",
                f"{host}:{port} is not free ({exc.strerror or exc})",
                "stop what listens there, or set PROVISIONER_API_PORT",
            )
    return Check("api port", "ok", f"{host}:{port} is free")


def cloud_checks(
    controller: str, clouds: Mapping[str, object], list_owned: Callable[[object], int]
) -> list[Check]:
    out: list[Check] = []
    for name, ports in sorted(clouds.items()):
        try:
            n = list_owned(ports)
        except Exception as exc:  # credentials, endpoint, permissions: the verdict says which
            out.append(
                Check(
                    f"cloud {name}",
                    "fail",
                    f"listing instances tagged {controller} failed: {type(exc).__name__}: {exc}"[
                        :300
                    ],
                    "check the credentials and the endpoint (AWS_ENDPOINT_URL / GCE endpoint)",
                )
            )
            continue
        out.append(Check(f"cloud {name}", "ok", f"reachable; {n} instance(s) of {controller}"))
    return out


def skew_checks(tracker: SkewTracker, probes: Mapping[str, SkewProbe]) -> list[Check]:
    """Each cloud's clock against this host's, measured from the answers doctor just got."""
    out: list[Check] = []
    for cloud, probe in sorted(probes.items()):
        e = tracker.estimate(cloud, probe.account)
        name = f"cloud {cloud} clock"
        if e is None:
            out.append(Check(name, "skip", "no answer carried a Date header"))
            continue
        text = (
            f"account {e.account}: {e.skew_s:+.1f} s (+/- {e.uncertainty_s:.1f} s) off this "
            f"host's clock, from {e.samples} answer(s)"
        )
        if e.warning:
            out.append(
                Check(
                    name,
                    "warn",
                    text,
                    f"more than {WARN_SKEW_S:g} s: check NTP on this host; the controller "
                    "translates the cloud's stamps by the skew and clamps them into what it saw",
                )
            )
        else:
            out.append(Check(name, "ok", text))
    return out


def run_doctor(
    settings: Settings,
    policy: Policy,
    catalog: Catalog,
    *,
    runner: CommandRunner | None = None,
    clouds: Mapping[str, CloudPorts] | None = None,
    check_port: bool = True,
    clock: Clock | None = None,
    resolve: Resolver = system_resolver,
) -> list[Check]:
    """Every check, in order. Builds its own Slurm runner and cloud ports unless given."""
    from provisioner.bootstrap import build_clouds
    from provisioner.command_runner import SubprocessRunner

    checks: list[Check] = []
    live_conf: dict[str, str] | None = None
    if settings.slurm_mode == "none":
        checks.append(Check("slurm", "skip", "slurm_mode is none"))
    else:
        r = runner or SubprocessRunner(
            slurm_conf=settings.slurm_conf, bin_dir=settings.slurm_bin_dir
        )
        facts = SlurmFacts(r, min(10.0, settings.slurm_timeout_s))
        checks += slurm_checks(facts, policy)
        ok, text = facts.config()
        live_conf = slurm_config(text) if ok else None
    try:
        ports = clouds if clouds is not None else build_clouds(settings, policy)
    except Exception as exc:  # a cloud SDK that cannot even be set up
        checks.append(Check("clouds", "fail", f"{type(exc).__name__}: {exc}"[:300]))
        ports = {}

    tracker = SkewTracker()
    now = clock or SystemClock()
    probes = watch_clouds(ports, tracker, lambda: now.now().timestamp())

    controller = policy.controller
    if "controller" not in policy.model_fields_set:  # the identity the store holds, if any
        controller = stored_controller(settings.store_url) or UNCLAIMED

    def owned(p: object) -> int:
        return len(p.capacity.list_owned(controller))  # type: ignore[attr-defined]

    checks += cloud_checks(controller, ports, owned)
    checks += skew_checks(tracker, probes)
    if settings.slurm_mode == "none" or settings.launcher != "none":
        why = "no Slurm to join" if settings.slurm_mode == "none" else "VMs played on this host"
        checks.append(Check("field", "skip", f"{why}: no burst VM of its own joins"))
    else:
        checks += field_checks(policy, ports, live_conf, resolve=resolve)
    checks += catalog_checks(policy, catalog)
    checks += budget_checks(policy)
    checks.append(idle_release_check(policy))
    checks.append(store_check(settings.store_url))
    if check_port:
        checks.append(port_check(settings.api_host, settings.api_port))
    return checks


def raise_on_failure(checks: Sequence[Check]) -> None:
    failed = [c for c in checks if c.failed]
    if failed:
        lines = "\n".join("  " + c.line() for c in failed)
        raise DoctorFailed(
            f"preflight failed ({len(failed)} check(s)); nothing was started or bought:\n{lines}"
        )


__all__ = ["Check", "DoctorFailed", "SlurmFacts", "pool_check", "raise_on_failure", "run_doctor"]
