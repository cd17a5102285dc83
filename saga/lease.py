"""Keeping leases alive while steps run: one heartbeat thread per coordinator."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

from saga.errors import StorageError
from saga.ports import SagaStore

_log = logging.getLogger("saga")
OnStop = Callable[[], None]


class Heartbeat:
    """Renews the leases of every saga this process is executing, every ``ttl / 3``, in one
    statement.

    Commits leave the lease alone (a commit stays a small in-place update), so
    the heartbeat alone keeps it alive, however many sagas the process runs.
    A renewal that finds the epoch moved on stops renewing that saga; the
    executor notices at its next (fenced) write. A renewal that finds a
    cancel request or a passed deadline calls the holder's ``on_stop`` (from
    the heartbeat thread): the async driver uses it to cancel a long step.
    """

    def __init__(self, store: SagaStore, lease_ttl: float) -> None:
        self.store = store
        self.lease_ttl = lease_ttl
        self._held: dict[str, tuple[int, OnStop | None]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopping = False

    @contextlib.contextmanager
    def holding(self, saga_id: str, epoch: int, on_stop: OnStop | None = None) -> Iterator[None]:
        """Keep ``saga_id``'s lease alive while the block runs."""
        with self._lock:
            self._held[saga_id] = (epoch, on_stop)
            self._start()
        try:
            yield
        finally:
            with self._lock:
                if self._held.get(saga_id, (None, None))[0] == epoch:
                    del self._held[saga_id]

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stopping = False
            self._thread = threading.Thread(target=self._loop, name="saga-heartbeat", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._thread = None
        self._wake.clear()

    def _loop(self) -> None:
        while not self._wake.wait(self.lease_ttl / 3):
            with self._lock:
                held = dict(self._held)
            if held:
                self._renew(held)
        self._wake.clear()

    def _renew(self, held: dict[str, tuple[int, OnStop | None]]) -> None:
        # One statement for every saga held: renewing them one by one took longer
        # than a lease once a process held a couple of hundred sagas.
        try:
            renewal = self.store.renew_many(
                {s: epoch for s, (epoch, _) in held.items()}, self.lease_ttl
            )
        except StorageError as error:
            _log.warning("lease renewal of %d sagas failed: %s", len(held), error)
            return
        for saga_id in renewal.lost:
            epoch = held[saga_id][0]
            with self._lock:
                if self._held.get(saga_id, (None, None))[0] == epoch:
                    del self._held[saga_id]
            _log.warning("saga %s: lease lost to another process (epoch %s)", saga_id, epoch)
        for saga_id in renewal.stop:
            on_stop = held[saga_id][1]
            if on_stop is None:
                continue
            try:
                on_stop()
            except RuntimeError as error:  # the holder's event loop is closed
                _log.warning("saga %s: could not signal the stop: %s", saga_id, error)
