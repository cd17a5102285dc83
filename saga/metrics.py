"""Prometheus metrics of sagas (the ``saga[metrics]`` extra): ``MetricsListener``.

Counters and histograms are fed by the lifecycle events this process tells;
the gauges (sagas in flight, stuck, failed, paused) come from two cheap queries of the
store, made at most every ``every`` seconds whatever the scrape rate. Labels
are the saga's name, the step's name and an outcome: never an id or a key, so
that the number of series stays bounded by the application's definitions.

``serve(registry, port)`` serves ``/metrics``, ``/livez`` (alias ``/healthz``) and
``/readyz`` on a thread (what ``saga worker --metrics-port`` uses); an application that
has an HTTP server exposes the same registry there instead
(``prometheus_client.generate_latest``).
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from saga._internal.listening import Listeners, SagaEvent
from saga._internal.ports import SagaStore
from saga._internal.status import SagaStatus

_ENDED = {
    "saga_completed": "completed",
    "saga_compensated": "compensated",
    "saga_failed": "failed",
    "saga_cancelled": "cancelled",
}
_ATTEMPTS = {
    "step_succeeded": "succeeded",
    "step_failed": "failed",
    "step_in_doubt": "in_doubt",
}
_UNDONE = {"compensation_done": "done", "compensation_failed": "failed"}
_CLAIMED_FOR = frozenset(
    ["rerun", "re-entered", "cancel", "pause", "operator recover", "mark-step", "recovery"]
)
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)


class MetricsListener:
    """Counts and times what sagas do, into ``registry`` (default: a new one; pass
    ``prometheus_client.REGISTRY`` to share the process's). Call :meth:`watch` with a
    coordinator to add the gauges and the listeners' own error counts."""

    inline = True  # a counter's increment is cheaper than handing the event to a thread

    def __init__(self, registry: CollectorRegistry | None = None, namespace: str = "saga") -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.namespace = namespace
        metric = _Factory(self.registry, namespace)
        self._count(metric)
        self._time(metric)
        self.unrunnable = metric.gauge(
            "unrunnable",
            "Stuck sagas a worker leaves unclaimed: it has not their definition (version, "
            "fingerprint) or may not import their compensations (saga worker sets it).",
        )

    def _count(self, metric: _Factory) -> None:
        """The counters: what sagas, steps, compensations and claims came to."""
        self.started = metric.counter("sagas_started", "Sagas started.", "saga")
        self.ended = metric.counter("sagas_ended", "Sagas ended, by outcome.", "saga", "outcome")
        self.attempts = metric.counter(
            "step_attempts",
            "Step attempts by outcome (retried: failed, and tried again).",
            "saga",
            "step",
            "outcome",
        )
        self.retries = metric.counter(
            "retries", "Retries scheduled, of steps and of compensations.", "saga", "step", "of"
        )
        self.compensations = metric.counter(
            "compensations", "Compensations ended, by outcome.", "saga", "step", "outcome"
        )
        self.claims = metric.counter(
            "claims", "Sagas claimed by this process, by what for.", "saga", "claimed_for"
        )
        self.leases_lost = metric.counter(
            "leases_lost", "Sagas whose lease this process lost to another.", "saga"
        )

    def _time(self, metric: _Factory) -> None:
        """The histograms: how long sagas, attempts, compensations and recoveries took."""
        self.saga_seconds = metric.histogram(
            "saga_duration_seconds", "Saga duration in this process, by outcome.", "saga", "outcome"
        )
        self.step_seconds = metric.histogram(
            "step_duration_seconds", "Step attempt duration.", "saga", "step"
        )
        self.compensation_seconds = metric.histogram(
            "compensation_duration_seconds", "Compensation attempt duration.", "saga", "step"
        )
        self.recovery_wait = metric.histogram(
            "recovery_wait_seconds",
            "From a dead owner's last write to the claim of its saga by recovery.",
            "saga",
        )

    def __call__(self, event: SagaEvent) -> None:
        kind, saga = event.kind, event.saga_name
        if kind == "saga_started":
            self.started.labels(saga).inc()
        elif kind in _ENDED:
            outcome = _ENDED[kind]
            self.ended.labels(saga, outcome).inc()
            if event.duration is not None:
                self.saga_seconds.labels(saga, outcome).observe(event.duration)
        elif kind in _ATTEMPTS or kind == "retry_scheduled":
            self._attempt(event)
        elif kind in _UNDONE:
            self.compensations.labels(saga, event.step, _UNDONE[kind]).inc()
            if event.duration is not None:
                self.compensation_seconds.labels(saga, event.step).observe(event.duration)
        elif kind == "compensation_attempt_failed" and event.duration is not None:
            self.compensation_seconds.labels(saga, event.step).observe(event.duration)
        elif kind in ("lease_claimed", "operator_action"):
            self._claimed(event)
        elif kind == "lease_lost":
            self.leases_lost.labels(saga).inc()

    def _attempt(self, event: SagaEvent) -> None:
        saga, step = event.saga_name, event.step
        if event.kind == "retry_scheduled":
            compensating = bool((event.detail or {}).get("compensating"))
            self.retries.labels(saga, step, "compensation" if compensating else "step").inc()
            if compensating:
                return
            outcome = "retried"
        else:
            outcome = _ATTEMPTS[event.kind]
        self.attempts.labels(saga, step, outcome).inc()
        if event.duration is not None:
            self.step_seconds.labels(saga, step).observe(event.duration)

    def _claimed(self, event: SagaEvent) -> None:
        detail = event.detail or {}
        if event.kind == "operator_action":
            if detail.get("action") == "cancel":
                return  # a request recorded, not a claim
            why = "operator " + str(detail.get("action"))
        else:
            why = str(detail.get("why") or "recovery")
            why = why if why in _CLAIMED_FOR else "other"
        self.claims.labels(event.saga_name, why).inc()
        last = detail.get("last_written_at")
        if isinstance(last, int | float):  # the clocks of two hosts may differ a little
            self.recovery_wait.labels(event.saga_name).observe(max(0.0, time.time() - last))

    def watch(self, coordinator: Any, every: float = 15.0) -> None:
        """Add the gauges of ``coordinator``'s store (queried at most every ``every``
        seconds) and its listeners' error and drop counts to the registry. A
        ``Coordinator`` or an ``AsyncCoordinator``; the listener is added to it too
        if it is not yet one of its listeners."""
        sync = getattr(coordinator, "sync", coordinator)  # an AsyncCoordinator's own
        if not sync.listeners.holds(self):
            sync.add_listener(self)
        self.registry.register(_Standing(sync.store, sync.listeners, every, self.namespace))


class _Factory:
    def __init__(self, registry: CollectorRegistry, namespace: str) -> None:
        self.registry, self.namespace = registry, namespace

    def counter(self, name: str, doc: str, *labels: str) -> Counter:
        return Counter(name, doc, labels, namespace=self.namespace, registry=self.registry)

    def gauge(self, name: str, doc: str) -> Gauge:
        return Gauge(name, doc, namespace=self.namespace, registry=self.registry)

    def histogram(self, name: str, doc: str, *labels: str) -> Histogram:
        return Histogram(
            name,
            doc,
            labels,
            namespace=self.namespace,
            registry=self.registry,
            buckets=_DURATION_BUCKETS,
        )


_GAUGED = (SagaStatus.RUNNING, SagaStatus.COMPENSATING, SagaStatus.FAILED, SagaStatus.PAUSED)
"""The statuses the gauges count: not the finished ones, whose index entries (a million,
in a busy database) a count of every status would read at each refresh."""


class _Standing(Collector):
    """The gauges read from the store, cached for ``every`` seconds."""

    def __init__(
        self, store: SagaStore, listeners: Listeners | None, every: float, namespace: str
    ) -> None:
        self.store, self.listeners, self.every = store, listeners, every
        self.prefix = f"{namespace}_"
        self._read_at = -float("inf")
        self._counts: dict[SagaStatus, int] = {}
        self._stuck = 0
        self._lock = threading.Lock()

    def _fresh(self) -> tuple[dict[SagaStatus, int], int]:
        with self._lock:
            if time.monotonic() - self._read_at >= self.every:
                self._counts = self.store.status_counts(statuses=_GAUGED)
                self._stuck = self.store.stuck_count()
                self._read_at = time.monotonic()
            return self._counts, self._stuck

    def collect(self) -> Iterator[Any]:
        counts, stuck = self._fresh()
        active = counts.get(SagaStatus.RUNNING, 0) + counts.get(SagaStatus.COMPENSATING, 0)
        name = self.prefix
        yield _gauge(f"{name}in_flight", "Unfinished sagas (running or compensating).", active)
        yield _gauge(f"{name}stuck", "Unfinished sagas nobody holds a live lease on.", stuck)
        failed = counts.get(SagaStatus.FAILED, 0)
        why = "Failed sagas: a compensation gave up, an operator must act."
        yield _gauge(f"{name}failed", why, failed)
        paused = counts.get(SagaStatus.PAUSED, 0)
        why = "Paused sagas: held for an operator to resume or compensate (nobody runs them)."
        yield _gauge(f"{name}paused", why, paused)
        if self.listeners is not None:
            errors = CounterMetricFamily(f"{name}listener_errors", "Times a listener raised.")
            errors.add_metric([], self.listeners.errors)
            yield errors
            dropped = CounterMetricFamily(
                f"{name}listener_events_dropped", "Events a listener that fell behind never got."
            )
            dropped.add_metric([], self.listeners.dropped)
            yield dropped


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def serve(
    registry: CollectorRegistry,
    port: int,
    host: str = "127.0.0.1",
    healthy: Callable[[], bool] = lambda: True,
    ready: Callable[[], bool] | None = None,
) -> http.server.ThreadingHTTPServer:
    """Serve ``/metrics`` (``registry``), ``/livez`` and its alias ``/healthz`` (200 while
    ``healthy()``, else 503) and ``/readyz`` (200 while ``ready()``, by default
    ``healthy()``) on ``host:port`` from a daemon thread; ``shutdown()`` the server to
    stop."""
    checks = {"/livez": healthy, "/healthz": healthy, "/readyz": ready or healthy}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the standard library's name
            if self.path == "/metrics":
                self._reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif self.path in checks:
                ok = _asked(checks[self.path])
                self._reply(200 if ok else 503, b"ok\n" if ok else b"unavailable\n")
            else:
                self._reply(404, b"not found\n")

        def _reply(self, status: int, body: bytes, kind: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a scrape every few seconds is not worth a log line

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    thread = threading.Thread(target=server.serve_forever, name="saga-metrics", daemon=True)
    thread.start()
    return server


def _asked(healthy: Callable[[], bool]) -> bool:
    try:
        return healthy()
    except Exception:  # an unhealthy check is an answer, not a crash
        return False
