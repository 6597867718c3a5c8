"""Heavy reads in a process of their own: the FOCUS export.

On two cores the API's threads share the GIL with the reconcile loop, so a reader turning a
month of ledger rows into CSV inside the controller's process slows every pass (issue 30: four
exports at once took passes from 0.3 to 2.7 s). Here each export runs in a child process with
its own database connection (`read_url`: the store's, or a replica's; opened read-only where
the engine can, PostgreSQL's `default_transaction_read_only`), and sends its CSV back
through a pipe in chunks. The API thread only copies bytes from the pipe to the socket, which
holds the GIL for microseconds per chunk. At most `max_concurrent` exports run at once; another
gets a 429 with Retry-After rather than a queue. The child starts with `spawn` (about a second
of imports, on the other core) and dies with its reader: a client that goes away closes the
pipe, and the child is killed.

A store without a URL another process can open (in-memory SQLite, the in-memory repositories)
is read in the API's thread, as before.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from fastapi import HTTPException

from provisioner.account.focus import FocusOptions, iter_focus_csv
from provisioner.domain.errors import ProvisionerError
from provisioner.ports.store import Ledger

RETRY_AFTER_S = 10
_DATA, _END, _ERROR = b"D", b"Z", b"E"


def _export_focus(
    conn: Connection,
    open_store: Callable[[str], Any],
    url: str,
    from_ts: float | None,
    to_ts: float | None,
    opts: FocusOptions,
) -> None:
    """The child: stream the export into `conn`, then an end mark (or an error mark). It runs
    niced, so on a busy machine the controller's loop gets the CPU first."""
    try:
        os.nice(10)
        store = open_store(url)
        try:
            for chunk in iter_focus_csv(store, from_ts, to_ts, opts):
                conn.send_bytes(_DATA + chunk.encode())
        finally:
            store.close()
        conn.send_bytes(_END)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the reader went away
    except Exception as exc:  # reported to the parent, which ends the response
        conn.send_bytes(_ERROR + f"{type(exc).__name__}: {exc}"[:500].encode())
    finally:
        conn.close()


@dataclass
class HeavyReads:
    """Runs exports in child processes on `read_url` (None: in the API's thread), each opening
    its store with `open_store` (a module-level function, so a spawned child can import it:
    the composition root passes `provisioner.store.read_only.open_read_only`)."""

    read_url: str | None = None
    open_store: Callable[[str], Any] | None = None
    max_concurrent: int = 2
    spawned: int = 0  # export processes started
    running: int = 0  # export processes alive now
    _slots: threading.BoundedSemaphore = field(init=False)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._slots = threading.BoundedSemaphore(self.max_concurrent)

    def focus_csv(
        self, store: Ledger, from_ts: float | None, to_ts: float | None, opts: FocusOptions
    ) -> Iterator[str | bytes]:
        if not self.read_url or self.open_store is None:
            return iter_focus_csv(store, from_ts, to_ts, opts)
        if not self._slots.acquire(blocking=False):
            raise HTTPException(
                429,
                f"{self.max_concurrent} FOCUS exports are running; retry in {RETRY_AFTER_S} s",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        try:
            ctx = multiprocessing.get_context("spawn")
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_export_focus,
                args=(send, self.open_store, self.read_url, from_ts, to_ts, opts),
                name="focus-export",
                daemon=True,
            )
            proc.start()
            send.close()
        except BaseException:
            self._slots.release()
            raise
        with self._lock:
            self.spawned += 1
            self.running += 1
        return self._relay(recv, proc)

    def _relay(self, recv: Connection, proc: Any) -> Iterator[bytes]:
        return _Relay(recv, proc, self)

    def _done(self) -> None:
        with self._lock:
            self.running -= 1
        self._slots.release()


class _Relay:
    """The export's chunks as they come from the child. Closing it (at the end, on an error,
    or when the response is dropped unread: a client gone before the first byte) ends the
    child and frees the slot, once."""

    def __init__(self, recv: Connection, proc: Any, owner: HeavyReads) -> None:
        self.recv, self.proc, self.owner = recv, proc, owner
        self.closed = False

    def __iter__(self) -> _Relay:
        return self

    def __next__(self) -> bytes:
        if self.closed:
            raise StopIteration
        try:
            msg = self.recv.recv_bytes()
        except EOFError:
            self.close()
            raise ExportFailed("the export process ended early") from None
        kind, body = msg[:1], msg[1:]
        if kind == _DATA:
            return body
        self.close()
        if kind == _END:
            raise StopIteration
        raise ExportFailed(body.decode(errors="replace"))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.recv.close()
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        self.owner._done()

    def __del__(self) -> None:
        self.close()


class ExportFailed(ProvisionerError):
    """The export's process failed after the answer began: the response is cut short."""


__all__ = ["ExportFailed", "HeavyReads"]
