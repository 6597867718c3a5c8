"""Observe Slurm: the `SlurmObserver` port and its two implementations.

* `CliSlurmObserver` runs `squeue --json` and, for nodes, `sinfo --json` on 22.05 or
  `scontrol show nodes --json` on 23.02+ (whose `sinfo --json` groups nodes by partition and
  state), with `scontrol -o -d show node` as the fallback, through an injected `CommandRunner`,
  each with a timeout. It detects the Slurm release when it starts (`sinfo --version`).
* `RestSlurmObserver` asks slurmrestd (`/slurm/<data_parser>/jobs`, `/nodes`) over its unix
  socket (22.05: `rest_auth/local`) or over HTTP with a JWT (`X-SLURM-USER-TOKEN`, 23.02+). The
  token is read from a file or an environment variable at each request and is never logged.
* `FallbackSlurmObserver` reads from a primary observer (slurmrestd) and from a fallback
  (the CLI) when the primary fails.

Either returns a fresh `ClusterSnapshot` (jobs and nodes only; NVML load, cloud instances and
spend are filled in by other observers) or raises `SnapshotError` with a message that names the
command and what was wrong. `observe_or_stale` turns that error into a snapshot marked stale, so
the controller keeps running and plans nothing destructive from it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, Protocol

from provisioner.clock import Clock
from provisioner.command_runner import CommandResult, CommandRunner, run_observed
from provisioner.domain.errors import InvalidArgument, SnapshotError
from provisioner.domain.nodes import Node
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.observe.slurm.parse import (
    DEFAULT_CLOUD_PARTITIONS,
    SlurmView,
    load_json,
    parse_jobs,
    parse_nodes,
    parse_scontrol_nodes,
    snapshot_from,
)
from provisioner.observe.slurm.version import (
    DATA_PARSERS,
    SlurmVersion,
    UnsupportedSlurmVersion,
    detect_version,
    parse_version,
    supported,
)

log = logging.getLogger(__name__)

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
        version: SlurmVersion | None = None,
        ping_timeout_s: float | None = None,
    ) -> None:
        self._runner = runner
        self.version = version
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

    def start(self) -> SlurmVersion:
        """Detect the Slurm release once (`sinfo --version`). SnapshotError when Slurm cannot be
        asked; UnsupportedSlurmVersion when the release is not one the parsers read."""
        if self.version is None:
            self.version = detect_version(
                self._runner, sinfo=self._sinfo, timeout_s=self._timeout_s
            )
            log.info("slurm: release %s (data_parser %s)", self.version, self.version.data_parser)
        return self.version

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
        if self._ping_timeout_s is not None:
            self.ping()
        version = self.start()
        taken_ts = self._clock.now().timestamp()
        argv = [self._squeue, "--json"]
        if version.squeue_json_filters:
            argv.append("--states=all")  # finished jobs too, as 22.05 and slurmrestd print
        src = " ".join(["squeue", *argv[1:]])
        jobs = parse_jobs(load_json(self._checked(argv), source=src), source=src)
        return snapshot_from(SlurmView(jobs=jobs, nodes=self._nodes(version)), taken_ts)

    def _nodes(self, version: SlurmVersion) -> tuple[Node, ...]:
        if self._nodes_source == "auto" and version.has_scontrol_json:
            argv = [self._scontrol, "show", "nodes", "--json"]
            res = self._run(argv)
            if res.ok:
                src = "scontrol show nodes --json"
                doc = load_json(res.stdout, source=src)
                return parse_nodes(doc, source=src, cloud_partitions=self._cloud_partitions)
            first_failure = res.describe()
        elif self._nodes_source in ("auto", "sinfo"):
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


class RestToken:
    """Where slurmrestd's JWT comes from: a file (re-read at each request, so a refreshed token
    is picked up) or an environment variable. The token itself never appears in a message."""

    def __init__(
        self, *, file: str | Path | None = None, env: str | None = None, user: str | None = None
    ) -> None:
        if file is None and env is None:
            raise InvalidArgument("a JWT needs a token file or an environment variable")
        self.file = Path(file) if file is not None else None
        self.env = env
        self.user = user

    def headers(self) -> dict[str, str]:
        if self.file is not None:
            try:
                token = self.file.read_text().strip()
            except OSError as exc:
                raise SnapshotError(f"slurmrestd token file {self.file}: {exc.strerror}") from None
            where = f"token file {self.file}"
        else:
            token = os.environ.get(str(self.env), "").strip()
            where = f"environment variable {self.env}"
        if token.startswith("SLURM_JWT="):  # `scontrol token` output pasted as is
            token = token.removeprefix("SLURM_JWT=")
        if not token:
            raise SnapshotError(f"slurmrestd JWT: {where} is empty")
        out = {"X-SLURM-USER-TOKEN": token}
        if self.user:
            out["X-SLURM-USER-NAME"] = self.user
        return out


class RestSlurmObserver:
    """Reads Slurm from slurmrestd: over its unix socket (22.05: `rest_auth/local`, no JWT) or
    over HTTP at `base_url` with a JWT (`rest_auth/jwt`). Without `api_version` it finds the
    newest data_parser the daemon serves (`/ping`) when it starts, and refuses an unsupported
    Slurm release."""

    def __init__(
        self,
        socket_path: str | None,
        clock: Clock,
        *,
        base_url: str | None = None,
        token: RestToken | None = None,
        api_version: str | None = "v0.0.38",
        timeout_s: float = 15.0,
        cloud_partitions: Collection[str] = DEFAULT_CLOUD_PARTITIONS,
    ) -> None:
        if (socket_path is None) == (base_url is None):
            raise InvalidArgument("slurmrestd needs exactly one of a unix socket or a base URL")
        self._socket_path = socket_path
        self._base = (base_url or "http://slurmrestd").rstrip("/")
        self._token = token
        self._clock = clock
        self._api = api_version
        self._timeout_s = timeout_s
        self._cloud_partitions = frozenset(cloud_partitions)
        self.version: SlurmVersion | None = None

    def _client(self) -> Any:
        import httpx

        transport = httpx.HTTPTransport(uds=self._socket_path) if self._socket_path else None
        headers = self._token.headers() if self._token is not None else {}
        return httpx.Client(transport=transport, timeout=self._timeout_s, headers=headers)

    def start(self) -> str:
        """The data_parser to use: the configured one, else the newest the daemon answers
        `/ping` on, which also gives the Slurm release (`meta`), checked to be supported."""
        if self._api is not None:
            return self._api
        candidates = sorted(DATA_PARSERS.values(), reverse=True)
        last = ""
        with self._client() as client:
            for api in candidates:
                status, text = self._request(client, f"/slurm/{api}/ping")
                if status == 200:
                    doc = load_json(text, source=f"slurmrestd /slurm/{api}/ping")
                    self.version = _rest_release(doc)
                    if self.version is not None:
                        supported(self.version)
                    self._api = api
                    return api
                last = f"/slurm/{api}/ping: HTTP {status}: {text[:200]}"
        raise SnapshotError(f"slurmrestd at {self._where()}: no supported API answers ({last})")

    def _where(self) -> str:
        return f"unix:{self._socket_path}" if self._socket_path else self._base

    def _request(self, client: Any, path: str) -> tuple[int, str]:
        import httpx

        source = f"slurmrestd GET {path}"
        try:
            resp = client.get(f"{self._base}{path}")
        except httpx.TimeoutException:
            raise SnapshotError(f"{source}: timed out after {self._timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            raise SnapshotError(f"{source}: {type(exc).__name__}: {exc}") from None
        return resp.status_code, str(resp.text)

    def _get(self, client: Any, what: str) -> str:
        import httpx

        url = f"{self._base}/slurm/{self._api}/{what}"
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
        self.start()
        taken_ts = self._clock.now().timestamp()
        with self._client() as client:
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


def _rest_release(doc: Mapping[str, Any]) -> SlurmVersion | None:
    """The Slurm release in a slurmrestd answer's `meta` (`meta.slurm.release` from v0.0.39 on,
    `meta.Slurm.version` in v0.0.38); None when the answer does not say."""
    meta = doc.get("meta")
    if not isinstance(meta, Mapping):
        return None
    slurm = meta.get("slurm") or meta.get("Slurm")
    if not isinstance(slurm, Mapping):
        return None
    release = slurm.get("release")
    if isinstance(release, str) and release:
        return parse_version(release, source="slurmrestd meta.slurm.release")
    v = slurm.get("version")
    if isinstance(v, Mapping) and v.get("major") is not None:
        text = f"{v.get('major')}.{v.get('minor', 0)}.{v.get('micro', 0)}"
        return parse_version(text, source="slurmrestd meta.slurm.version")
    return None


class FallbackSlurmObserver:
    """slurmrestd first, the CLI when slurmrestd fails (down, token expired, HTTP error). An
    unsupported release is not a failure to fall back from: it is raised."""

    def __init__(self, primary: SlurmObserver, fallback: SlurmObserver) -> None:
        self.primary = primary
        self.fallback = fallback
        self.last_source = ""
        self.last_primary_error = ""

    def observe(self) -> ClusterSnapshot:
        try:
            snap = self.primary.observe()
        except SnapshotError as exc:
            self.last_primary_error = str(exc)
            log.warning("slurm: primary source failed (%s); reading through the CLI", exc)
        else:
            self.last_source = "primary"
            return snap
        try:
            snap = self.fallback.observe()
        except SnapshotError as exc:
            raise SnapshotError(f"{self.last_primary_error}; fallback: {exc}") from None
        self.last_source = "fallback"
        return snap


__all__ = [
    "CliSlurmObserver",
    "FallbackSlurmObserver",
    "RestSlurmObserver",
    "RestToken",
    "SlurmObserver",
    "UnsupportedSlurmVersion",
    "observe_or_stale",
]
