"""Observe Slurm: the `SlurmObserver` port and its two implementations.

* `CliSlurmObserver` runs `squeue --json` and `sinfo --json` (or `scontrol -o -d show node`, the
  22.05 fallback when JSON is missing) through an injected `CommandRunner`, each with a timeout.
* `RestSlurmObserver` asks slurmrestd over its unix socket (`/slurm/v0.0.38/jobs`, `/nodes`).

Either returns a fresh `ClusterSnapshot` (jobs and nodes only; NVML load, cloud instances and
spend are filled in by other observers) or raises `SnapshotError` with a message that names the
command and what was wrong. `observe_or_stale` turns that error into a snapshot marked stale, so
the controller keeps running and plans nothing destructive from it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import Any, Literal, Protocol

from provisioner.clock import Clock
from provisioner.domain.errors import SnapshotError
from provisioner.domain.nodes import Node
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.observe.slurm_parse import (
    DEFAULT_CLOUD_PARTITIONS,
    SlurmView,
    load_json,
    parse_jobs,
    parse_nodes,
    parse_scontrol_nodes,
    snapshot_from,
)
from provisioner.observe.slurm_runner import CommandResult, CommandRunner, run_observed

NodesSource = Literal["auto", "sinfo", "scontrol"]


class SlurmObserver(Protocol):
    def observe(self) -> ClusterSnapshot:
        """Read jobs and nodes now. Raises SnapshotError when the answer is missing or unusable."""
        ...


def observe_or_stale(
    observer: SlurmObserver, *, previous: ClusterSnapshot | None, now_ts: float
) -> ClusterSnapshot:
    """A fresh snapshot, or on SnapshotError the previous one (empty when none) marked stale with
    the error as its reason. The controller keeps running; the planner plans nothing destructive
    from a stale snapshot."""
    try:
        return observer.observe()
    except SnapshotError as exc:
        base = previous if previous is not None else ClusterSnapshot(taken_ts=now_ts)
        if base.stale:
            base = replace(base, stale_reasons=())
        return base.mark_stale(f"slurm: {exc}")


class CliSlurmObserver:
    """Reads Slurm through its commands. `timeout_s` bounds each command."""

    def __init__(
        self,
        runner: CommandRunner,
        clock: Clock,
        *,
        timeout_s: float = 15.0,
        nodes_source: NodesSource = "auto",
        cloud_partitions: Collection[str] = DEFAULT_CLOUD_PARTITIONS,
        squeue: str = "squeue",
        sinfo: str = "sinfo",
        scontrol: str = "scontrol",
        ping_timeout_s: float | None = None,
    ) -> None:
        self._runner = runner
        # `scontrol ping` first, with a short timeout: with slurmctld down, squeue and sinfo
        # each retry for several seconds before failing, so a pass took about 9 s and said only
        # "squeue failed". The ping answers at once and names the cause. None: no ping.
        self._ping_timeout_s = ping_timeout_s
        self._clock = clock
        self._timeout_s = timeout_s
        self._nodes_source = nodes_source
        self._cloud_partitions = frozenset(cloud_partitions)
        self._squeue = squeue
        self._sinfo = sinfo
        self._scontrol = scontrol

    def _run(self, argv: list[str]) -> CommandResult:
        return run_observed(self._runner, argv, timeout_s=self._timeout_s)

    def _checked(self, argv: list[str]) -> str:
        res = self._run(argv)
        if not res.ok:
            raise SnapshotError(res.describe())
        return res.stdout

    def ping(self) -> None:
        """Raise SnapshotError("slurmctld unreachable ...") unless `scontrol ping` says UP."""
        assert self._ping_timeout_s is not None
        try:
            res = run_observed(
                self._runner, [self._scontrol, "ping"], timeout_s=self._ping_timeout_s
            )
        except SnapshotError as exc:
            raise SnapshotError(f"slurmctld unreachable: {exc}") from None
        text = " ".join(res.stdout.split())
        if not res.ok or "DOWN" in text or " UP" not in text:
            raise SnapshotError(f"slurmctld unreachable: {text or res.describe()}")

    def observe(self) -> ClusterSnapshot:
        taken_ts = self._clock.now().timestamp()
        if self._ping_timeout_s is not None:
            self.ping()
        jobs_doc = load_json(self._checked([self._squeue, "--json"]), source="squeue --json")
        jobs = parse_jobs(jobs_doc, source="squeue --json")
        return snapshot_from(SlurmView(jobs=jobs, nodes=self._nodes()), taken_ts)

    def _nodes(self) -> tuple[Node, ...]:
        if self._nodes_source in ("auto", "sinfo"):
            argv = [self._sinfo, "--json"]
            res = self._run(argv)
            if res.ok:
                doc = load_json(res.stdout, source="sinfo --json")
                return parse_nodes(doc, cloud_partitions=self._cloud_partitions)
            if self._nodes_source == "sinfo":
                raise SnapshotError(res.describe())
            first_failure = res.describe()
        else:
            first_failure = ""
        res = self._run([self._scontrol, "-o", "-d", "show", "node"])
        if not res.ok:
            both = f"{first_failure}; then {res.describe()}" if first_failure else res.describe()
            raise SnapshotError(both)
        if not res.stdout.strip():
            raise SnapshotError("scontrol -o -d show node: empty output")
        return parse_scontrol_nodes(res.stdout, cloud_partitions=self._cloud_partitions)


class RestSlurmObserver:
    """Reads Slurm from slurmrestd over its unix socket (22.05: `rest_auth/local`, no JWT)."""

    def __init__(
        self,
        socket_path: str,
        clock: Clock,
        *,
        api_version: str = "v0.0.38",
        timeout_s: float = 15.0,
        cloud_partitions: Collection[str] = DEFAULT_CLOUD_PARTITIONS,
    ) -> None:
        self._socket_path = socket_path
        self._clock = clock
        self._api = api_version
        self._timeout_s = timeout_s
        self._cloud_partitions = frozenset(cloud_partitions)

    def _get(self, client: Any, what: str) -> str:
        import httpx

        url = f"http://slurmrestd/slurm/{self._api}/{what}"
        source = f"slurmrestd GET /slurm/{self._api}/{what}"
        try:
            resp = client.get(url)
        except httpx.TimeoutException:
            raise SnapshotError(f"{source}: timed out after {self._timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            raise SnapshotError(f"{source}: {type(exc).__name__}: {exc}") from None
        if resp.status_code != 200:
            raise SnapshotError(f"{source}: HTTP {resp.status_code}: {resp.text[:200]}")
        return str(resp.text)

    def observe(self) -> ClusterSnapshot:
        import httpx

        taken_ts = self._clock.now().timestamp()
        transport = httpx.HTTPTransport(uds=self._socket_path)
        with httpx.Client(transport=transport, timeout=self._timeout_s) as client:
            jobs_text = self._get(client, "jobs")
            nodes_text = self._get(client, "nodes")
        src = f"slurmrestd /slurm/{self._api}"
        jobs = parse_jobs(load_json(jobs_text, source=f"{src}/jobs"), source=f"{src}/jobs")
        nodes = parse_nodes(
            load_json(nodes_text, source=f"{src}/nodes"),
            source=f"{src}/nodes",
            cloud_partitions=self._cloud_partitions,
        )
        return snapshot_from(SlurmView(jobs=jobs, nodes=nodes), taken_ts)
