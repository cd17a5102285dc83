"""Keeping leases alive while steps run: one heartbeat thread per coordinator."""

from __future__ import annotations

import contextlib
import logging
import math
import numbers
import threading
from collections.abc import Callable, Iterator

from saga._internal.errors import ConfigurationError, StorageError
from saga._internal.ports import KnowsOwners, SagaStore

_log = logging.getLogger("saga.engine")
OnStop = Callable[[], None]

MIN_LEASE_TTL = 0.1
"""The shortest lease accepted (s). Below it a renewal (a database round trip, every
third of the lease) no longer fits comfortably inside the lease on a busy machine."""
MAX_LEASE_TTL = 86_400.0
"""The longest lease accepted (s), one day: a dead process's sagas wait this long at most."""
RENEWALS_PER_LEASE = 3
"""The heartbeat renews a lease this many times per ``lease_ttl``, so a lease outlives
one renewal that fails or comes late."""


def check_lease_ttl(value: object, name: str = "lease_ttl") -> float:
    """``value`` as seconds, or ``ConfigurationError`` naming it and what to pass instead.

    Zero, a negative number, NaN or infinity would make every saga claimable from
    its first write (another process would run its step a second time, at once)
    or spin the heartbeat; a lease of more than a day leaves a dead process's
    sagas waiting that long.
    """
    accepted = (
        f"pass a number of seconds from {MIN_LEASE_TTL:g} to {MAX_LEASE_TTL:g} (one day), "
        "e.g. 30: how long a silent process keeps its sagas"
    )
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigurationError(f"{name} must be a number of seconds, not {value!r}; {accepted}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigurationError(f"{name} must be positive and finite, not {value!r}; {accepted}")
    if not MIN_LEASE_TTL <= seconds <= MAX_LEASE_TTL:
        raise ConfigurationError(f"{name} {seconds:g}s is out of range; {accepted}")
    return seconds


def renewal_interval(lease_ttl: float) -> float:
    """Seconds between two renewals: a third of the lease (at least 33 ms, for 0.1 s)."""
    return lease_ttl / RENEWALS_PER_LEASE


class Heartbeat:
    """Renews the leases of every saga this process is executing, every ``ttl / 3``, in one
    statement. The ttl is checked (:func:`check_lease_ttl`), so the interval is too.

    Commits leave the lease alone (a commit stays a small in-place update), so
    the heartbeat alone keeps it alive, however many sagas the process runs.
    A renewal that finds the epoch moved on stops renewing that saga; the
    executor notices at its next (fenced) write. A renewal that finds a
    cancel request or a passed deadline calls the holder's ``on_stop`` (from
    the heartbeat thread): the async driver uses it to cancel a long step.

    With an ``owner`` and a store that :class:`~saga._internal.ports.KnowsOwners`, the owner
    is recorded as alive before its first creation or claim (:meth:`register`), and
    every renewal checks that the record still proves it: once this process has
    died, a claimer may take its sagas at once instead of waiting for their leases
    (see docs/recovery.md).
    """

    def __init__(self, store: SagaStore, lease_ttl: float, owner: str | None = None) -> None:
        self.store = store
        self.owner = owner
        # (owner, store) when the store records owners; else leases are all there is.
        self._recorded = (
            (owner, store) if owner is not None and isinstance(store, KnowsOwners) else None
        )
        self.lease_ttl = check_lease_ttl(lease_ttl)
        self.interval = renewal_interval(self.lease_ttl)
        self._held: dict[str, tuple[int, OnStop | None]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopping = False

    @contextlib.contextmanager
    def holding(self, saga_id: str, epoch: int, on_stop: OnStop | None = None) -> Iterator[None]:
        """Keep ``saga_id``'s lease alive while the block runs."""
        self.register()
        with self._lock:
            self._held[saga_id] = (epoch, on_stop)
            self._start()
        try:
            yield
        finally:
            with self._lock:
                if self._held.get(saga_id, (None, None))[0] == epoch:
                    del self._held[saga_id]

    def holds(self, saga_id: str) -> bool:
        """Whether ``saga_id``'s lease is being kept alive."""
        with self._lock:
            return saga_id in self._held

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stopping = False
            self._thread = threading.Thread(target=self._loop, name="saga-heartbeat", daemon=True)
            self._thread.start()

    @property
    def registered(self) -> bool:
        """Whether this owner is recorded as alive (or its store records no owners)."""
        if self._recorded is None:
            return True
        owner, store = self._recorded
        return store.owner_registered(owner)

    def register(self) -> None:
        """Record this owner as alive (once, and again if its store was closed; a failure
        is logged and tried again later): before any saga row names it, so that no saga
        of a killed process lacks it."""
        if self._recorded is None or self.registered:
            return
        owner, store = self._recorded
        try:
            store.register_owner(owner)
        except StorageError as error:  # the next renewal tries again; meanwhile: leases only
            _log.warning("could not record owner %s as alive: %s", owner, error)

    def release(self) -> None:
        """Forget this owner in the store (its coordinator closes, holding nothing)."""
        if self._recorded is not None:
            owner, store = self._recorded
            store.release_owner(owner)

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._thread = None
        self._wake.clear()

    def _loop(self) -> None:
        while not self._wake.wait(self.interval):
            with self._lock:
                held = dict(self._held)
            if held:
                self._renew(held)
                self.register()  # if an earlier try failed (the store watches the rest)
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
