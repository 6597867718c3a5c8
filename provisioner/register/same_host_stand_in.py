"""The same-host stand-in: plays the cloud VM's boot on the controller's own host.

A STAND-IN, not the join: burst VMs join as hosts of their own in tests/hosts (each instance
booted from its user-data, its slurmd joining over the network; docs/slurm.md, "The node
model"). This one stays for the older live Slurm tests and the chaos soak, where the instance
has no host. On a real cloud VM, cloud-init starts
`slurmd` pointed at the controller and the node registers; here, for each instance the cloud
adapter reports running (moto, the in-memory fake) or each node Slurm asks to resume, the
launcher starts a real `slurmd -b -N <node>` on this host, and on terminate it stops that slurmd.
Everything else (slurmctld, power saving, scheduling, job launch, drain) is real Slurm.

Details that matter on one host (see ../shared/notes/slurm.md):
* `-b`: report a fresh boot, or slurmctld keeps the node POWERING_UP ("still waiting for boot").
* `env --default-signal`: a Slurm hook runs with most signals blocked and a slurmd that inherits
  the mask ignores SIGTERM forever.
* an explicit PATH and absolute binaries: hooks get no PATH.
* processes are found only by the pid file slurmd writes (`SlurmdPidFile=.../slurmd-%n.pid`),
  and a pid is signalled only if its command line is that node's slurmd.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Protocol

from provisioner.command_runner import SYSTEM_PATH
from provisioner.domain.errors import ProvisionerError
from provisioner.domain.instances import CloudInstance, InstanceState

_RUNNING_STATES = frozenset(
    {InstanceState.ALLOCATED, InstanceState.JOINING, InstanceState.READY, InstanceState.DRAINING}
)
_GONE_STATES = frozenset(
    {InstanceState.TERMINATING, InstanceState.TERMINATED, InstanceState.FAILED}
)


class LauncherError(ProvisionerError):
    """slurmd could not be started or stopped."""


def _alive(pid: int) -> bool:
    """Alive and not a zombie (PID 1 in some sandboxes reaps orphans lazily)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


class SameHostSlurmdStandIn:
    def __init__(
        self,
        slurm_conf: Path | str,
        pid_dir: Path | str,
        *,
        spool_dir: Path | str | None = None,
        slurmd: str = "/usr/sbin/slurmd",
        env_binary: str = "/usr/bin/env",
        timeout_s: float = 20.0,
    ) -> None:
        self.slurm_conf = str(slurm_conf)
        self.pid_dir = Path(pid_dir)
        self.spool_dir = Path(spool_dir) if spool_dir is not None else None
        self.slurmd = slurmd
        self.env_binary = env_binary
        self.timeout_s = timeout_s

    def pid_file(self, node: str) -> Path:
        return self.pid_dir / f"slurmd-{node}.pid"

    def _pid(self, node: str) -> int | None:
        try:
            pid = int(self.pid_file(node).read_text().strip())
        except (OSError, ValueError):
            return None
        if not _alive(pid):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        args = [a.decode(errors="replace") for a in cmdline if a]
        is_slurmd = bool(args) and os.path.basename(args[0]) == "slurmd"
        return pid if is_slurmd and node in args else None

    def running(self, node: str) -> bool:
        return self._pid(node) is not None

    def start(self, node: str) -> bool:
        """Boot the node: start its slurmd. False when it already runs (idempotent)."""
        if self.running(node):
            return False
        if self.spool_dir is not None:
            (self.spool_dir / f"d-{node}").mkdir(parents=True, exist_ok=True)
        argv = [self.env_binary, "--default-signal", self.slurmd, "-b"]
        argv += ["-f", self.slurm_conf, "-N", node]
        env = {"PATH": SYSTEM_PATH, "SLURM_CONF": self.slurm_conf}
        try:
            proc = subprocess.run(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                timeout=self.timeout_s,
                start_new_session=True,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise LauncherError(f"slurmd for {node} did not start: {exc}") from None
        if proc.returncode != 0:
            tail = proc.stderr.strip().splitlines()[-1:] or [""]
            raise LauncherError(f"slurmd for {node} exited {proc.returncode}: {tail[0]}")
        return True

    def stop(self, node: str) -> bool:
        """Terminate the node: stop its slurmd. False when none runs (idempotent)."""
        pid = self._pid(node)
        if pid is None:
            return False
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return False
        return True

    def sync(self, instances: Iterable[CloudInstance]) -> tuple[list[str], list[str]]:
        """Match slurmds to what the cloud reports: start a node's slurmd when its instance is
        running, stop it when the instance is terminating or gone. Returns (started, stopped)."""
        started: list[str] = []
        stopped: list[str] = []
        for inst in instances:
            if not inst.node_name:
                continue
            if inst.state in _RUNNING_STATES and self.start(inst.node_name):
                started.append(inst.node_name)
            elif inst.state in _GONE_STATES and self.stop(inst.node_name):
                stopped.append(inst.node_name)
        return started, stopped


class FailMarker(Protocol):
    """The slice of SlurmControl the handler needs."""

    def mark_failed(self, nodes: Sequence[str], reason: str) -> tuple[str, ...]: ...


class SameHostCloudStandIn:
    """A `PowerRequestHandler` for Slurm-driven mode with the launcher as the cloud: resume boots
    the node (unless it is in `never_join`, to play an instance that never comes up), suspend
    terminates it, resume-fail marks the node failed in Slurm (jobs requeued) and terminates it."""

    def __init__(
        self,
        launcher: SameHostSlurmdStandIn,
        control: FailMarker | None = None,
        *,
        never_join: Collection[str] = (),
    ) -> None:
        self.launcher = launcher
        self.control = control
        self.never_join = set(never_join)
        self.failed: list[tuple[str, tuple[str, ...]]] = []

    def resume(self, nodes: Sequence[str]) -> None:
        for n in nodes:
            if n not in self.never_join:
                self.launcher.start(n)

    def suspend(self, nodes: Sequence[str]) -> None:
        for n in nodes:
            self.launcher.stop(n)

    def resume_failed(self, nodes: Sequence[str]) -> None:
        for n in nodes:
            self.launcher.stop(n)
            jobs: tuple[str, ...] = ()
            if self.control is not None:
                jobs = self.control.mark_failed([n], "burst node did not join (ResumeTimeout)")
            self.failed.append((n, jobs))
