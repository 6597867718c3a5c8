"""Several controllers as real processes on one store: the world of the HA tests and of
bench/failover.py. A uniquely named module (not conftest): the children run it as a script.

Each child is the reconcile tests' controller (reconcile_world: moto's server as AWS, its own
in-memory FAKE Slurm cluster with the same queue, the pool `burst`) run by the real
ControllerLoop with a Leadership on the shared store. Simulated time runs at SPEED times the
wall clock from a start both children share, so their clocks agree; the lease runs on the
database's (real) clock. A child reports its role after every tick in a JSON status file, and
can SIGKILL or SIGSTOP itself at a step of the pass (the loop's crash hooks).

    python ha_world.py '{"url": ..., "endpoint": ..., "holder": ..., ...}'
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TTL_S = 2.0  # the lease, in real seconds
TICK_S = 0.25  # real seconds between passes
# Simulated seconds per real second: a lease of 2 s is 120 simulated seconds, well inside the
# world's unbound (600 s) and join (900 s) timeouts, so a takeover does not look like a node
# that never joined.
SPEED = 60.0
BURST_RUNTIME_S = 120.0  # the burst job's runtime (simulated): a cycle takes a few seconds
IDLE_TIMEOUT_S = 60.0

T = TypeVar("T")


class ScaledClock:
    """Simulated time: t0 + (wall - wall0) x speed, the same in every child."""

    def __init__(self, t0: float, wall0: float, speed: float) -> None:
        self.t0, self.wall0, self.speed = t0, wall0, speed

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.t0 + (time.time() - self.wall0) * self.speed, UTC)


# ---------------------------------------------------------------------------- the child


def _child(cfg: dict[str, Any]) -> None:
    from reconcile_world import CONTROLLER, make_controller, make_fake, policy

    from provisioner.reconcile.leadership import Leadership
    from provisioner.reconcile.loop import ControllerLoop

    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    status_file = Path(cfg["status_file"])
    state: dict[str, Any] = {"pid": os.getpid(), "holder": cfg["holder"], "ticks": 0}

    def write(**extra: Any) -> None:
        state.update(extra)
        tmp = status_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(status_file)

    clock = ScaledClock(float(cfg["t0"]), float(cfg["wall0"]), float(cfg["speed"]))
    fake = make_fake(clock, float(cfg["t0"]), burst_runtime_s=BURST_RUNTIME_S)  # type: ignore[arg-type]
    paused: list[str] = []

    def hook(step: str) -> None:
        if step == cfg.get("kill_at"):
            write(killed_at=time.time(), step=step)
            os.kill(os.getpid(), signal.SIGKILL)
        if step == cfg.get("pause_at") and not paused:
            paused.append(step)
            write(paused_at=time.time(), step=step)
            os.kill(os.getpid(), signal.SIGSTOP)
            write(resumed_at=time.time())

    pol = policy(idle_timeout_s=IDLE_TIMEOUT_S)
    c = make_controller(cfg["url"], clock, fake, cfg["endpoint"], hook=hook, pol=pol)  # type: ignore[arg-type]
    lead = Leadership(c.store, CONTROLLER, ttl_s=float(cfg["ttl"]), holder=cfg["holder"])
    loop: ControllerLoop

    def on_tick() -> None:
        v = lead.view()
        write(
            ticks=state["ticks"] + 1,
            role="leader" if v.leading else "standby",
            token=lead.token,
            passes=c.reconciler.passes,
            failures=loop.failures,
            error=v.error,
        )

    loop = ControllerLoop(c.reconciler, float(cfg["tick"]), leadership=lead, on_tick=on_tick)
    signal.signal(signal.SIGTERM, lambda *_: loop.request_stop())
    write(role="starting")
    # Built and imported, the child waits for the parent's go before its first tick, so a
    # standby can be ready before the leader reaches its step.
    gate = Path(cfg["gate"])
    while not gate.exists():
        time.sleep(0.02)
    loop.run()
    write(role="stopped")
    c.store.close()


# ---------------------------------------------------------------------------- the parent


def leads(store: Any, holder: str) -> Any:
    """The lease when `holder` holds it, else None."""
    from reconcile_world import CONTROLLER

    lease = store.lease(CONTROLLER)
    return lease if lease is not None and lease.holder == holder else None


def cycle_done(store: Any) -> bool:
    """The burst ran to its end: every instance terminated and its books closed (the
    accountant bills the last stretch in a pass after the one that saw the termination), no
    intent left pending."""
    from provisioner.domain.instances import InstanceState

    records = store.instances()
    return (
        bool(records)
        and all(si.instance.state is InstanceState.TERMINATED for si in records)
        and not store.instances(needs_billing=True)
        and not store.pending_intents()
    )


def wait_for(what: str, fn: Callable[[], T | None], timeout_s: float = 60.0) -> T:
    """Poll `fn` until it returns something truthy: real processes, so a deadline, no sleep
    standing in for time."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.05)


@dataclass
class Child:
    holder: str
    proc: subprocess.Popen[bytes]
    status_file: Path
    log_file: Path
    _log: Any = field(repr=False, default=None)

    def status(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.status_file.read_text()))
        except (OSError, ValueError):
            return {}

    def go(self) -> None:
        """Let the child start ticking (it has built its controller and waits for this)."""
        self.status_file.with_suffix(".go").touch()

    def ready(self) -> bool:
        return self.status().get("role") == "starting"

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stopped_by_signal(self) -> bool:
        """True once the process is stopped (SIGSTOP): state T in /proc."""
        try:
            stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] == "T"

    def stop(self, timeout_s: float = 30.0) -> int:
        if self.alive():
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
        return int(self.proc.returncode)


@dataclass
class World:
    """What the children share: the store, moto's endpoint and the simulated clock's start."""

    url: str
    endpoint: str
    folder: Path
    t0: float
    wall0: float = field(default_factory=time.time)
    ttl_s: float = TTL_S
    tick_s: float = TICK_S
    speed: float = SPEED
    children: list[Child] = field(default_factory=list)

    def clock(self) -> ScaledClock:
        """The world's simulated clock, as every child keeps it. The stand-in cloud runs on it
        too (moto's `use_clock`), as a real cloud's clock runs at the controller's rate: left on
        the wall clock, moto's stamps would crawl at 1/SPEED of the children's time."""
        return ScaledClock(self.t0, self.wall0, self.speed)

    def start(self, holder: str, *, go: bool = True, **steps: str) -> Child:
        """Start a controller process; with go=False it waits for `child.go()` to tick."""
        cfg = {
            "url": self.url,
            "endpoint": self.endpoint,
            "holder": holder,
            "t0": self.t0,
            "wall0": self.wall0,
            "speed": self.speed,
            "tick": self.tick_s,
            "ttl": self.ttl_s,
            "status_file": str(self.folder / f"{holder}.json"),
            "gate": str(self.folder / f"{holder}.go"),
            **steps,
        }
        log_file = self.folder / f"{holder}.log"
        out = log_file.open("wb")
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), str(REPO), *sys.path]),
        }
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "ha_world.py"), json.dumps(cfg)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
        child = Child(holder, proc, Path(cfg["status_file"]), log_file, out)
        self.children.append(child)
        if go:
            child.go()
        return child

    def leader_and_standby(self, leader: Child, standby: Child, leads: Callable[[], Any]) -> None:
        """Both built; the leader ticks first and takes the lease, then the standby ticks."""

        def built() -> bool:
            for c in (leader, standby):
                if not c.alive():
                    raise AssertionError(
                        f"{c.holder} exited ({c.proc.returncode}) before it was built:\n"
                        + c.log()[-3000:]
                    )
            return leader.ready() and standby.ready()

        wait_for("both controllers to be built", built)
        leader.go()
        wait_for(f"{leader.holder} to lead", leads)
        standby.go()
        wait_for(f"{standby.holder} to tick", lambda: standby.status().get("ticks", 0) >= 1)

    def stop_all(self) -> None:
        for c in self.children:
            c.stop()
        # Captured output, which pytest shows only when the test failed: what each child did.
        for c in self.children:
            print(f"--- {c.holder}: exit {c.proc.returncode}, status {c.status()}")
            print(c.log()[-4000:])


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))
