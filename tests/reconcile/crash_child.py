"""Run the controller in a child process until it reaches `step`, then SIGKILL itself there
(what `kill -9` does to a controller: no cleanup, no except, no finally).

    python crash_child.py STORE_URL MOTO_ENDPOINT STEP T0
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import UTC, datetime

from reconcile_world import TICK, make_controller, make_fake

from provisioner.clock import ManualClock


def main() -> None:
    store_url, endpoint, step, t0 = sys.argv[1:5]
    clock = ManualClock(datetime.fromtimestamp(float(t0), UTC))
    fake = make_fake(clock, float(t0))

    def hook(at: str) -> None:
        if at == step:
            os.kill(os.getpid(), signal.SIGKILL)

    c = make_controller(store_url, clock, fake, endpoint, hook=hook)
    for _ in range(10):
        c.reconciler.run_pass()
        clock.advance(TICK)
    sys.exit(3)  # never reached the step


if __name__ == "__main__":
    main()
