"""Why a burst VM did not join, read from its serial console (the cloud's GetConsoleOutput or
getSerialPortOutput) when the controller gives up on it: the join program
(infra/bootstrap/gpu-burst-join.py) prints `gpu-burst-join: FAILED <step>: <why>` when a step
fails, and every step it finished before. A VM whose join program never ran is told by what
cloud-init said instead. The answer goes on the decision and the instance's history, so an
operator reads "munge key rejected" instead of "did not join in 240 s"."""

from __future__ import annotations

import re

PREFIX = "gpu-burst-join: "
MAX_CHARS = 400
_ANSI = re.compile(r"\x1b\[[0-9;:?]*[A-Za-z]")
_CLOUD_INIT_TROUBLE = re.compile(r"cloud-init|cc_|scripts-user|user-data|cloud-config", re.I)
_TROUBLE = re.compile(r"WARNING|ERROR|Failed|Traceback|not found|No such file", re.I)


def _clean(line: str) -> str:
    line = _ANSI.sub("", line).strip()
    return re.sub(r"^\[\s*\d+\.\d+\]\s*", "", line)  # the kernel's time stamp


def diagnose(console: str) -> str:
    """What the console says about the join, in one line ("" when it says nothing)."""
    lines = [_clean(x) for x in console.splitlines()]
    said = [x[x.index(PREFIX) + len(PREFIX) :] for x in lines if PREFIX in x]
    failed = [x for x in said if x.startswith("FAILED")]
    if failed:
        return failed[-1][:MAX_CHARS]
    if said:
        return f"the join program's last word: {said[-1]}"[:MAX_CHARS]
    trouble = [x for x in lines if _CLOUD_INIT_TROUBLE.search(x) and _TROUBLE.search(x)]
    if trouble:
        return f"the join program never ran; cloud-init: {trouble[-1]}"[:MAX_CHARS]
    if any(lines):
        return "the join program never ran (nothing from it on the console)"
    return ""
