"""A private munged for tests: its own key, its own socket, started for real and stopped.

munged refuses to run as root unless forced (`--force`); the tests run as root. Each daemon has
its own key, so a credential made by another is what a host without the cluster's key makes.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from provisioner.domain.errors import InvalidState


@contextlib.contextmanager
def private_munged(key: bytes | None = None) -> Iterator[str]:
    """Run munged with `key` (a fresh random one by default) in a folder of its own under
    /tmp (not pytest's, which only root may enter: a test's non-root caller must reach the
    socket); yields its socket. The folder goes with the daemon."""
    folder = Path(tempfile.mkdtemp(prefix="gpu-burst-munged-", dir="/tmp"))
    os.chmod(folder, 0o711)  # others may reach the socket, not list the folder
    key_file = folder / "munge.key"
    key_file.write_bytes(key or secrets.token_bytes(1024))
    os.chmod(key_file, 0o400)
    sock = str(folder / "munge.sock")
    argv = [
        "munged", "--force", "-S", sock, f"--key-file={key_file}",
        f"--pid-file={folder / 'munged.pid'}", f"--log-file={folder / 'munged.log'}",
        f"--seed-file={folder / 'munged.seed'}",
    ]  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True, timeout=30)
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(sock):  # a real daemon starting: poll with a deadline
            if time.monotonic() > deadline:
                raise InvalidState(f"munged on {sock} did not start")
            time.sleep(0.05)
        yield sock
    finally:
        subprocess.run(["munged", "-S", sock, "--stop"], capture_output=True, timeout=30)
        shutil.rmtree(folder, ignore_errors=True)


def credential(sock: str, payload: str, *, as_user: str = "") -> str:
    """`munge -s payload` against `sock`, as root or (`as_user`) as another user."""
    argv = ["munge", "-S", sock, "-s", payload]
    if as_user:
        argv = ["runuser", "-u", as_user, "--", *argv]
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30).stdout


__all__ = ["credential", "private_munged"]
