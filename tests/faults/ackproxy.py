"""A loopback proxy in front of PostgreSQL that loses the acknowledgement of chosen commits.

:class:`AckProxy` listens on 127.0.0.1 (an ephemeral port) and relays each
client connection to the real server, reading the PostgreSQL wire protocol's
framing both ways: the startup packet (no type byte; an SSL or GSSAPI request
is answered ``N``, so the session goes on in clear), then messages of one type
byte and an int32 length. From the client it reads the SQL of each request
(simple ``Query``; ``Parse`` remembered by statement name and counted when a
``Bind`` executes it, so prepared statements are seen too); from the server,
``ReadyForQuery``'s status byte (``I`` idle, ``T`` in a transaction, ``E``
failed) and the ``CommandComplete`` tags. A transaction ends when the status
comes back to ``I``: its SQL, and whether it committed, become a
:class:`Transaction`, whether it was an explicit ``BEGIN ... COMMIT`` or a
single autocommit statement (saga's PostgreSQL hot path sends no ``COMMIT``).

The server's answers to each request are held back until its
``ReadyForQuery``, so that when an armed :class:`Loss` matches a committed
write transaction, the client never sees the answer: the server committed,
the proxy closes both sockets, and the client sees its connection drop, as
when the network fails between the server's COMMIT and its reply. Before the
drop, the proxy can keep the client waiting for its answer until another
connection has committed a transaction that ``until`` accepts (a sibling's
commit lands first; the client's retry can only come after it). Or it drops
at once and holds new connections (accepted, then kept waiting) until then.
Every wait is bounded (``Loss.timeout``: then the proxy goes on, and counts it
in ``timeouts``), and the proxy stops itself after ``lifetime`` seconds.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType

from sqlalchemy.engine import make_url

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
LIFETIME = 300.0
"""The proxy stops itself after this long (s): a forgotten one never outlives its test."""
MAX_LINKS = 256
COPY_RESPONSES = (b"G", b"H", b"W")  # the server waits for the client: forward at once
_NOT_TABLES = ("set", "skip", "nowait", "of")  # DO UPDATE SET, FOR UPDATE SKIP LOCKED ...
_WRITE = re.compile(r"\b(INSERT\s+INTO|DELETE\s+FROM|UPDATE)\s+\"?(\w+)\"?", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Transaction:
    """One transaction a proxied connection ended: its SQL, in order, and how it ended."""

    link: int
    sql: tuple[str, ...]
    committed: bool
    lost: bool = False

    @property
    def tables_written(self) -> frozenset[str]:
        """Tables an INSERT, UPDATE or DELETE of the transaction names (lower case)."""
        found = (m.group(2).lower() for text in self.sql for m in _WRITE.finditer(text))
        return frozenset(name for name in found if name not in _NOT_TABLES)

    @property
    def wrote(self) -> bool:
        return bool(self.tables_written)

    def inserts_into(self, table: str) -> bool:
        pattern = re.compile(rf"\bINSERT\s+INTO\s+\"?{table}\"?\b", re.IGNORECASE)
        return any(pattern.search(text) for text in self.sql)


Predicate = Callable[[Transaction], bool]


def writes_to(*tables: str) -> Predicate:
    """A transaction that writes (INSERT, UPDATE or DELETE) any of ``tables``."""
    return lambda transaction: bool(transaction.tables_written & set(tables))


SAGA_RECORDS = writes_to("saga_steps", "saga_events")
"""A saga commit that records something (a lease renewal writes neither table)."""


@dataclasses.dataclass(frozen=True)
class Loss:
    """Lose the acknowledgement of the ``nth`` committed write transaction ``match`` accepts.

    With ``until``, the client's retry comes only after another connection
    committed a transaction ``until`` accepts: the client waits for its answer
    until then and the connection drops after (``hold=False``), or it drops at
    once and new connections are held until then (``hold=True``).
    """

    match: Predicate
    nth: int = 1
    until: Predicate | None = None
    hold: bool = False
    timeout: float = 30.0


class _Closed(Exception):
    """The peer closed its end."""


class _Link:
    """One client connection and its server connection, with what the proxy read of them."""

    def __init__(self, number: int, client: socket.socket) -> None:
        self.number = number
        self.client = client
        self.server: socket.socket | None = None
        self.statements: dict[bytes, str] = {}
        self.request: list[str] = []  # SQL sent since the last Sync or Query
        self.requests: collections.deque[list[str]] = collections.deque()
        self.transaction: list[str] = []  # SQL answered since the status was last "I"
        self.failed = False
        self.tags: list[bytes] = []
        self.batch: list[bytes] = []  # the server's answers held until ReadyForQuery
        self.flushing = False

    def close(self) -> None:
        for sock in (self.client, self.server):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()


@dataclasses.dataclass
class _Armed:
    loss: Loss
    seen: int = 0


class AckProxy:
    """See the module's docstring. Use as a context manager; ``url()`` gives its address."""

    def __init__(self, upstream: tuple[str, int], lifetime: float = LIFETIME) -> None:
        self.upstream = upstream
        self.transactions: list[Transaction] = []
        self.drops = 0
        self.timeouts = 0
        self.connections = 0
        self.held = 0
        self.caught = threading.Event()
        """Set when an armed loss matched: the server committed, the client has no answer."""
        self.dropped = threading.Event()
        self._cond = threading.Condition()
        self._armed: list[_Armed] = []
        self._watches: list[tuple[Predicate, threading.Event]] = []
        self._hold: tuple[int, Predicate, float] | None = None
        self._links: list[_Link] = []
        self._threads: list[threading.Thread] = []
        self._numbers = itertools.count(1)
        self._stopping = threading.Event()
        self._expires = time.monotonic() + lifetime
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]

    @classmethod
    def before(cls, url: str) -> AckProxy:
        """A proxy in front of the server that the saga URL ``url`` names."""
        parsed = make_url(url)
        return cls((parsed.host or "127.0.0.1", parsed.port or 5432))

    def url(self, url: str) -> str:
        """``url`` (its database, user and options, e.g. a search_path) through the proxy."""
        parsed = make_url(url).set(host="127.0.0.1", port=self.port)
        parsed = parsed.update_query_dict({"sslmode": "disable", "gssencmode": "disable"})
        return parsed.render_as_string(hide_password=False)

    def __enter__(self) -> AckProxy:
        self._spawn(self._accept)
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._cond:
            links = list(self._links)
            self._cond.notify_all()
        for link in links:
            link.close()
        for thread in list(self._threads):
            if thread is not threading.current_thread():
                thread.join(timeout=5.0)

    def arm(self, loss: Loss) -> None:
        with self._cond:
            self._armed.append(_Armed(loss))

    def watch(self, predicate: Predicate) -> threading.Event:
        """An event set once a transaction committed from now on is accepted by ``predicate``."""
        event = threading.Event()
        with self._cond:
            self._watches.append((predicate, event))
        return event

    def committed(self, predicate: Predicate) -> list[Transaction]:
        """The committed transactions so far that ``predicate`` accepts."""
        with self._cond:
            return [t for t in self.transactions if t.committed and predicate(t)]

    # -- connections ---------------------------------------------------------------------------

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name="ackproxy")
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stopping.is_set() and time.monotonic() < self._expires:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            client.settimeout(None)
            with self._cond:
                if len(self._links) >= MAX_LINKS:
                    client.close()
                    continue
                link = _Link(next(self._numbers), client)
                self._links.append(link)
                self.connections += 1
            self._spawn(self._serve, link)
        if not self._stopping.is_set():  # lived its lifetime: stops itself
            self._spawn(self.stop)

    def _serve(self, link: _Link) -> None:
        try:
            self._wait_if_held()
            link.server = socket.create_connection(self.upstream, timeout=5.0)
            link.server.settimeout(None)
            if self._startup(link):
                self._spawn(self._pump_server, link)
                self._pump_client(link)
        except (OSError, _Closed):
            pass
        finally:
            link.close()

    def _wait_if_held(self) -> None:
        with self._cond:
            if self._hold is None:
                return
            baseline, until, deadline = self._hold
            self.held += 1
            released = self._cond.wait_for(
                lambda: self._stopping.is_set() or self._found(until, baseline),
                max(0.0, deadline - time.monotonic()),
            )
            if not released:
                self.timeouts += 1
            self._hold = None

    def _startup(self, link: _Link) -> bool:
        """Relay the startup packet; False for a cancel request (nothing follows it)."""
        assert link.server is not None
        while True:
            header = _recv(link.client, 4)
            body = _recv(link.client, struct.unpack("!I", header)[0] - 4)
            code: int = struct.unpack("!I", body[:4])[0]
            if code in (SSL_REQUEST, GSSENC_REQUEST):
                link.client.sendall(b"N")  # no encryption: the session goes on in clear
                continue
            link.server.sendall(header + body)
            return code != CANCEL_REQUEST

    def _pump_client(self, link: _Link) -> None:
        assert link.server is not None
        while True:
            kind, body = _read_message(link.client)
            with self._cond:
                self._observe_client(link, kind, body)
            link.server.sendall(_frame(kind, body))

    def _observe_client(self, link: _Link, kind: bytes, body: bytes) -> None:
        if kind == b"Q":
            link.requests.append([_cstrings(body, 1)[0]])
        elif kind == b"P":
            name, query = _cstrings(body, 2)
            link.statements[name.encode()] = query
        elif kind == b"B":
            _portal, name = _cstrings(body, 2)
            link.request.append(link.statements.get(name.encode(), "<unknown statement>"))
        elif kind == b"S":
            link.requests.append(link.request)
            link.request = []
        elif kind == b"H":  # the client waits for answers before its Sync
            link.flushing = True

    def _pump_server(self, link: _Link) -> None:
        try:
            self._relay_startup(link)
            while True:
                kind, body = _read_message(link.server)  # type: ignore[arg-type]
                link.batch.append(_frame(kind, body))
                if kind == b"E":
                    link.failed = True
                elif kind == b"C":
                    link.tags.append(body.rstrip(b"\0"))
                if kind == b"Z":
                    if not self._ready(link, body[:1]):
                        return
                elif link.flushing or kind in COPY_RESPONSES:
                    link.flushing = True
                    self._forward(link)
        except (OSError, _Closed):
            pass
        finally:
            link.close()

    def _relay_startup(self, link: _Link) -> None:
        """Authentication and parameters pass at once, up to the first ReadyForQuery."""
        while True:
            kind, body = _read_message(link.server)  # type: ignore[arg-type]
            link.client.sendall(_frame(kind, body))
            if kind == b"Z":
                return

    def _forward(self, link: _Link) -> None:
        batch, link.batch = link.batch, []
        link.client.sendall(b"".join(batch))

    # -- transactions and losses -----------------------------------------------------------------

    def _ready(self, link: _Link, status: bytes) -> bool:
        """A ReadyForQuery arrived; False when the connection was dropped instead."""
        loss = None
        with self._cond:
            link.transaction.extend(link.requests.popleft() if link.requests else [])
            link.flushing = False
            if status != b"I":  # healthy again after a ROLLBACK TO SAVEPOINT, say
                link.failed, link.tags = status == b"E", []
            elif link.transaction:
                loss = self._ended(link)
            else:
                link.failed, link.tags = False, []
        if loss is None:
            self._forward(link)
            return True
        self._lose(link, loss)
        return False

    def _ended(self, link: _Link) -> Loss | None:
        """Record the transaction that just ended; the loss it triggers, if any."""
        committed = not link.failed and b"ROLLBACK" not in link.tags
        ended = Transaction(link.number, tuple(link.transaction), committed)
        link.transaction, link.failed, link.tags = [], False, []
        loss = self._matching(ended) if committed and ended.wrote else None
        self.transactions.append(dataclasses.replace(ended, lost=loss is not None))
        for predicate, event in self._watches if committed else ():
            if predicate(ended):
                event.set()
        self._cond.notify_all()
        return loss

    def _matching(self, transaction: Transaction) -> Loss | None:
        for armed in self._armed:
            if armed.loss.match(transaction):
                armed.seen += 1
                if armed.seen == armed.loss.nth:
                    self._armed.remove(armed)
                    return armed.loss
        return None

    def _lose(self, link: _Link, loss: Loss) -> None:
        """The server committed; the client gets no answer: its connection drops."""
        link.batch = []
        with self._cond:
            baseline = len(self.transactions)
            deadline = time.monotonic() + loss.timeout
            self.caught.set()
            if loss.until is not None and not loss.hold:
                self._wait_for_others(link, loss.until, baseline, loss.timeout)
            if loss.until is not None and loss.hold:
                self._hold = (baseline, loss.until, deadline)
            self.drops += 1
        link.close()
        self.dropped.set()

    def _wait_for_others(
        self, link: _Link, until: Predicate, baseline: int, timeout: float
    ) -> None:
        def landed() -> bool:
            return self._stopping.is_set() or self._found(until, baseline, link.number)

        if not self._cond.wait_for(landed, timeout):
            self.timeouts += 1

    def _found(self, predicate: Predicate, baseline: int, other_than: int | None = None) -> bool:
        return any(
            t.committed and t.link != other_than and predicate(t)
            for t in self.transactions[baseline:]
        )


@contextlib.contextmanager
def proxy_for(url: str) -> Iterator[AckProxy]:
    """A running :class:`AckProxy` in front of ``url``'s server, stopped afterwards."""
    with AckProxy.before(url) as proxy:
        yield proxy


# -- framing ---------------------------------------------------------------------------------


def _recv(sock: socket.socket, size: int) -> bytes:
    chunks, missing = [], size
    while missing:
        chunk = sock.recv(min(missing, 65536))
        if not chunk:
            raise _Closed
        chunks.append(chunk)
        missing -= len(chunk)
    return b"".join(chunks)


def _read_message(sock: socket.socket) -> tuple[bytes, bytes]:
    header = _recv(sock, 5)
    length = struct.unpack("!I", header[1:])[0]
    return header[:1], _recv(sock, length - 4)


def _frame(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


def _cstrings(body: bytes, count: int) -> list[str]:
    """The first ``count`` NUL-terminated strings of a message body."""
    return [part.decode("utf-8", "replace") for part in body.split(b"\0", count)[:count]]
