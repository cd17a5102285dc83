"""Fault-test child processes. Run from the repository root (see :func:`spawn`)::

    python -m tests.faults.child seed URL LEDGER COUNT [--cm COUNT] [--saga NAME] [--how JSON]
                                          [--prefix KEY] [--lease S]
    python -m tests.faults.child recover URL [--go FILE] [--timeout S] [--once] [--lease S]
                                             [--async]
    python -m tests.faults.child own URL LEDGER KEY --freeze STEP [--saga NAME] [--lease S]
    python -m tests.faults.child paused-recover URL --paused FILE --go FILE
    python -m tests.faults.child admin-recover URL [--lease S]
    python -m tests.faults.child worker URL [--lease S]

``seed`` starts COUNT declarative sagas (keys ``seed-N``) and ``--cm``
context-manager ones (``seed-cm-N``; ``--prefix`` replaces ``seed``) that
each stop at step s2 as a dying process would (see
:class:`tests.faults.sagas.Abandon`), prints ``seeded``, then kills itself
with SIGKILL: they are left running, their leases running out; ``--how``
adds misbehaviour to their input. ``recover`` recovers until nothing is
unfinished and prints what it claimed as JSON (``--once``: a single
``recover()`` pass; ``--async``: one ``AsyncCoordinator.recover()`` pass).
``admin-recover`` is ``saga recover`` (``admin.recover``) and prints its
JSON; ``worker`` is ``saga worker`` (``admin.run_worker``) until SIGTERM,
its log lines on stderr as they come, then its log and figures as JSON. The
recoverers hold their claims for ``--lease`` seconds and are never frozen
(``freeze``) inside a lease renewal. ``own`` runs one saga whose step
``--freeze`` stops the process with SIGSTOP after acting; once continued it
prints how it ended. ``paused-recover`` is ``saga recover``'s code path
(``admin.recover``): it reads the stuck sagas, finishes the first one,
creates ``--paused`` and waits for ``--go`` before claiming the rest. What
every child does alike (the command line, the ``ready``/``--go`` handshake,
the JSON reports) is in tests/children.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from saga import AsyncCoordinator, Coordinator, LeaseLostError, RecoveryReport, SagaFailed
from saga._internal.ports import SagaStore
from tests import children
from tests.children import arg, recover_until_settled, report
from tests.faults import sagas

SEED_LEASE_TTL = 0.3
"""The seeding process's lease (s): its sagas are claimable this long after it dies. Where
workers already run, a longer one (``--lease``) keeps them from taking a saga the child
is still seeding (a renewal can come late on a loaded machine)."""

MODULE = "tests.faults.child"


def spawn(
    args: Sequence[str], env: dict[str, str] | None = None, **options: Any
) -> subprocess.Popen[str]:
    """``python -m tests.faults.child ARGS`` from the repository root (``env`` added)."""
    return children.spawn(MODULE, args, env=env, **options)


def recoverer(url: str, lease_ttl: float = 10.0) -> Coordinator:
    """A coordinator that knows the fault sagas and trusts their context-manager steps."""
    return children.recoverer(url, [sagas.__name__], lease_ttl)


STORE_CALLS = (
    "create", "commit", "renew_many", "claim", "claim_expired", "transact",
    "request_cancel", "request_pause", "record_event", "record_fenced_event",
    "load", "find", "list", "events", "now",
)  # fmt: skip
"""The store's calls that open a transaction on the database."""


def freeze_between_store_calls(store: SagaStore) -> None:
    """Make every store call under :data:`tests.faults.sagas.FREEZE_GUARD`, so a step that
    freezes its process never does so while another of its threads (the heartbeat, the
    worker's other sagas) is inside a transaction: a process frozen there would hold
    SQLite's write lock (or a row lock on PostgreSQL) and keep every other recoverer
    from the database, which is not the zombie these tests are about."""
    for name in STORE_CALLS:
        setattr(store, name, _guarded(getattr(store, name)))


def _guarded(call: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        with sagas.FREEZE_GUARD:
            return call(*args, **kwargs)

    return guarded


def seed(
    url: str,
    ledger: str,
    count: int,
    cm: int,
    saga: str,
    how: dict[str, Any],
    prefix: str,
    lease: float,
) -> None:
    data = {**sagas.how(ledger, abandon="s2"), **how}
    with Coordinator(url, lease_ttl=lease) as coord:
        for number in range(count + cm):
            key = f"{prefix}-{number}" if number < count else f"{prefix}-cm-{number - count}"
            try:
                if number < count:
                    coord.run(sagas.SAGAS[saga], data=data, key=key)
                else:
                    sagas.run_block(coord, sagas.CONTEXT, key, data)
            except sagas.Abandon:
                continue
            raise AssertionError(f"{key} was not abandoned at s2")
        print("seeded", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def recover_all(
    url: str, go: str | None, timeout: float, once: bool, lease: float, use_async: bool
) -> None:
    with recoverer(url, lease) as coord:
        children.get_ready(coord, go, timeout)
        if use_async:
            owner, outcomes = asyncio.run(_recover_async(url, lease))
        else:
            freeze_between_store_calls(coord.store)
            owner = coord.owner
            outcomes = coord.recover().outcomes if once else recover_until_settled(coord, timeout)
        children.report_outcomes(owner, outcomes)


async def _recover_async(url: str, lease: float) -> tuple[str, list[Any]]:
    trusted = [sagas.__name__]
    async with AsyncCoordinator(url, lease_ttl=lease, trusted_modules=trusted) as coord:
        freeze_between_store_calls(coord.sync.store)
        recovered: RecoveryReport = await coord.recover()
        return coord.owner, recovered.outcomes


def admin_recover(url: str, lease: float) -> None:
    """``saga recover``'s code path, with a short lease."""
    from saga.admin import recover

    with recoverer(url, lease) as coord:
        freeze_between_store_calls(coord.store)
        summary = recover(coord)
        report(owner=coord.owner, **summary.as_json())


def worker(url: str, lease: float, concurrency: int = 1) -> None:
    """``saga worker``'s loop until SIGTERM (``--concurrency`` sagas at once); its lines
    on stderr, then all of them as JSON."""
    from saga.admin import run_worker

    stop, lines = threading.Event(), []
    signal.signal(signal.SIGTERM, lambda _number, _frame: stop.set())

    def log(line: str) -> None:
        lines.append(line)
        print(line, file=sys.stderr, flush=True)

    with recoverer(url, lease) as coord:
        freeze_between_store_calls(coord.store)
        stats = run_worker(coord, stop, interval=0.05, concurrency=concurrency, log=log)
        report(owner=coord.owner, log=lines, stats=dataclasses.asdict(stats))


def own(url: str, ledger: str, key: str, saga: str, freeze: str, lease: float) -> None:
    data = sagas.how(ledger, freeze=freeze)
    with Coordinator(url, lease_ttl=lease) as coord:
        try:
            view = coord.run(sagas.SAGAS[saga], data=data, key=key)
            report(status=view.status.value)
        except LeaseLostError as lost:
            report(error="LeaseLostError", epoch=lost.epoch)
        except SagaFailed as failed:
            report(status=failed.status.value)


def paused_recover(url: str, paused: str, go: str) -> None:
    from saga.admin import recover

    def progress(item: object, done: int, total: int) -> None:
        del item, total
        if done == 1:  # every saga was read and planned; the next claim waits
            Path(paused).touch()
            children.wait_for(Path(go), 60.0)

    with recoverer(url) as coord:
        summary = recover(coord, progress=progress)
        report(**summary.as_json())


def command_line() -> children.CommandLine:
    """The commands of the module docstring."""
    commands = children.CommandLine(f"python -m {MODULE}")
    commands.add(
        "seed",
        seed,
        arg("url"),
        arg("ledger"),
        arg("count", type=int, help="declarative sagas (faults-3)"),
        arg("--cm", type=int, default=0, help="and context-manager sagas (faults-cm)"),
        arg("--saga", default=sagas.PLAIN.name, help="the declarative sagas' definition"),
        arg("--how", type=json.loads, default={}, help="misbehaviour (JSON) to add"),
        arg("--prefix", default="seed", help="the keys' prefix"),
        arg("--lease", type=float, default=SEED_LEASE_TTL, help="longer while workers run"),
    )
    commands.add(
        "recover",
        recover_all,
        arg("url"),
        arg("--go"),
        arg("--timeout", type=float, default=60.0),
        arg("--once", action="store_true", help="one recover() pass, not until settled"),
        arg("--lease", type=float, default=10.0),
        arg("--async", dest="use_async", action="store_true", help="one async pass"),
    )
    commands.add(
        "own",
        own,
        arg("url"),
        arg("ledger"),
        arg("key"),
        arg("--freeze", required=True),
        arg("--saga", default=sagas.PLAIN.name),
        arg("--lease", type=float, default=0.5),
    )
    paused = (arg("url"), arg("--paused", required=True), arg("--go", required=True))
    commands.add("paused-recover", paused_recover, *paused)
    commands.add(
        "admin-recover", admin_recover, arg("url"), arg("--lease", type=float, default=10.0)
    )
    commands.add(
        "worker",
        worker,
        arg("url"),
        arg("--lease", type=float, default=10.0),
        arg("--concurrency", type=int, default=1),
    )
    return commands


def main(argv: list[str] | None = None) -> None:
    command_line().main(argv)


if __name__ == "__main__":
    main()
