"""Crash safety: stop the controller dead at each step of a scale-up and a scale-down, start a
new one on the same store and the same world (moto's server, the fake Slurm cluster), and check
that it ends with no orphaned and no duplicated instance and a consistent ledger.

Two ways to die: an exception raised from the loop's hook at the step (in-process: the
controller object is dropped, nothing after the step runs), and a child process that SIGKILLs
itself at the step (kill -9: not even `finally` runs; the SQLite file is left as the kernel
left it)."""

from __future__ import annotations

import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from reconcile_world import (
    TICK,
    books,
    ever_launched,
    live_instances,
    make_controller,
    make_fake,
    start_clock,
)

from provisioner.domain.instances import InstanceState
from provisioner.domain.jobs import JobState
from provisioner.reconcile.loop import (
    STEP_DRAIN_AFTER_SLURM,
    STEP_SCALE_UP_AFTER_CLOUD,
    STEP_SCALE_UP_AFTER_INTENT,
    STEP_SCALE_UP_BEFORE_REGISTER,
    STEP_TERMINATE_AFTER_CLOUD,
    STEP_TERMINATE_AFTER_INTENT,
    STEPS,
)

pytestmark = pytest.mark.aws
HERE = Path(__file__).resolve().parent
SCALE_UP = (STEP_SCALE_UP_AFTER_INTENT, STEP_SCALE_UP_AFTER_CLOUD, STEP_SCALE_UP_BEFORE_REGISTER)
SCALE_DOWN = (STEP_DRAIN_AFTER_SLURM, STEP_TERMINATE_AFTER_INTENT, STEP_TERMINATE_AFTER_CLOUD)


class Crash(BaseException):
    """Not an Exception: no handler in the loop catches it, like a kill."""


def finish_and_check(url: str, clock, fake, endpoint: str) -> None:
    """A new controller on the same store and world runs the burst to its end."""
    c = make_controller(url, clock, fake, endpoint)
    for _ in range(45):
        c.reconciler.run_pass()
        clock.advance(TICK)
    records = c.store.instances()
    launched = ever_launched(endpoint)
    assert len(launched) == 1, f"duplicated instances: {launched}"
    assert [si.instance.instance_id for si in records] == launched, "an orphan has no record"
    assert [si.instance.state for si in records] == [InstanceState.TERMINATED]
    assert live_instances(endpoint) == []
    assert c.store.pending_intents() == []
    assert fake.with_job("1002").state is JobState.COMPLETED
    assert fake.with_job("1002").node.startswith("burst-")
    b = books(c.store)
    assert b.ledger > 0 and abs(b.ledger - b.expected) < Decimal("0.01")
    c.store.close()


@pytest.mark.parametrize("step", STEPS)
def test_crash_at_step_then_restart(db_url, moto, step):
    clock = start_clock()
    t0 = clock.now().timestamp()
    fake = make_fake(clock, t0)
    url = db_url

    def hook(at: str) -> None:
        if at == step:
            raise Crash(at)

    c = make_controller(url, clock, fake, moto.endpoint, hook=hook)
    with pytest.raises(Crash):
        for _ in range(40):
            c.reconciler.run_pass()
            clock.advance(TICK)
    if step in SCALE_DOWN:
        (si,) = c.store.instances()
        assert si.instance.state in (InstanceState.READY, InstanceState.DRAINING)
    del c  # the dead controller: its store connection is simply abandoned
    clock.advance(TICK)
    finish_and_check(url, clock, fake, moto.endpoint)


@pytest.mark.parametrize("step", SCALE_UP)
def test_kill_9_during_scale_up_then_restart(db_url, moto, step):
    clock = start_clock()
    t0 = clock.now().timestamp()
    url = db_url
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    proc = subprocess.run(
        [sys.executable, str(HERE / "crash_child.py"), url, moto.endpoint, step, repr(t0)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    # the world as the child left it: the same fake cluster state (the child died in its first
    # pass, before it changed anything in Slurm), moto's instances, the store file
    fake = make_fake(clock, t0)
    clock.advance(TICK)
    finish_and_check(url, clock, fake, moto.endpoint)
