"""Fault-test child processes. Run from the repository root (see :func:`spawn`)::

    python -m tests.faults.child seed URL LEDGER COUNT [--cm COUNT] [--saga NAME] [--how JSON]
    python -m tests.faults.child recover URL [--go FILE] [--timeout S] [--once] [--lease S]
                                             [--async]
    python -m tests.faults.child own URL LEDGER KEY --freeze STEP [--saga NAME] [--lease S]
    python -m tests.faults.child paused-recover URL --paused FILE --go FILE
    python -m tests.faults.child admin-recover URL [--lease S]
    python -m tests.faults.child worker URL [--lease S]

``seed`` starts COUNT declarative sagas (keys ``seed-N``) and ``--cm``
context-manager ones (``seed-cm-N``) that each stop at step s2 as a dying
process would (see :class:`tests.faults.sagas.Abandon`), prints ``seeded``,
then kills itself with SIGKILL: they are left running, their leases running
out; ``--how`` adds misbehaviour to their input. ``recover`` recovers until
nothing is unfinished and prints what it claimed as JSON (``--once``: a
single ``recover()`` pass; ``--async``: one ``AsyncCoordinator.recover()``
pass). ``admin-recover`` is ``saga recover`` (``admin.recover``) and prints
its JSON; ``worker`` is ``saga worker`` (``admin.run_worker``) until SIGTERM,
its log lines on stderr as they come, then its log and figures as JSON. The
recoverers hold their claims for ``--lease`` seconds and are never frozen
(``freeze``) inside a lease renewal. ``own`` runs one
saga whose step ``--freeze`` stops the process with SIGSTOP after acting;
once continued it prints how it ended. ``paused-recover`` is ``saga
recover``'s code path (``admin.recover``): it reads the stuck sagas,
finishes the first one, creates ``--paused`` and waits for ``--go`` before
claiming the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from saga import AsyncCoordinator, Coordinator, LeaseLostError, RecoveryReport, SagaFailed
from saga.ports import Renewal, SagaStore
from tests.crash.child import ROOT, recover_until_settled
from tests.crash.harness import child_env
from tests.faults import sagas

SEED_LEASE_TTL = 0.3
"""The seeding process's lease (s): its sagas are claimable this long after it dies."""


def spawn(
    args: Sequence[str], env: dict[str, str] | None = None, **options: Any
) -> subprocess.Popen[str]:
    """``python -m tests.faults.child ARGS`` from the repository root (``env`` added)."""
    command = [sys.executable, "-m", "tests.faults.child", *args]
    environment = {**child_env(), **(env or {})}
    return subprocess.Popen(command, cwd=ROOT, env=environment, text=True, **options)


def recoverer(url: str, lease_ttl: float = 10.0) -> Coordinator:
    """A coordinator that knows the fault sagas and trusts their context-manager steps."""
    return Coordinator(url, lease_ttl=lease_ttl, trusted_modules=[sagas.__name__])


def freeze_between_renewals(store: SagaStore) -> None:
    """Renew leases under :data:`tests.faults.sagas.FREEZE_GUARD`, so a step that freezes
    its process never does so while the heartbeat is inside a renewal: a process frozen
    there would hold SQLite's write lock (or the saga's row lock on PostgreSQL) and keep
    every other recoverer from the saga."""
    renew_many = store.renew_many

    def guarded(held: Mapping[str, int], lease_ttl: float) -> Renewal:
        with sagas.FREEZE_GUARD:
            return renew_many(held, lease_ttl)

    store.renew_many = guarded  # type: ignore[method-assign]


def _wait_for(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.005)


def seed(url: str, book: str, count: int, cm: int, saga: str, how: dict[str, Any]) -> None:
    data = {**sagas.how(book, abandon="s2"), **how}
    with Coordinator(url, lease_ttl=SEED_LEASE_TTL) as coord:
        for number in range(count + cm):
            key = f"seed-{number}" if number < count else f"seed-cm-{number - count}"
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
        coord.create_schema()
        if go is not None:
            print("ready", flush=True)
            _wait_for(Path(go), timeout)
        if use_async:
            owner, outcomes = asyncio.run(_recover_async(url, lease))
        else:
            freeze_between_renewals(coord.store)
            owner = coord.owner
            outcomes = coord.recover().outcomes if once else recover_until_settled(coord, timeout)
        claimed = [[o.saga_id, o.status and o.status.value, o.error] for o in outcomes]
        lost = [o.saga_id for o in outcomes if o.lost]
        print(json.dumps({"owner": owner, "outcomes": claimed, "lost": lost}), flush=True)


async def _recover_async(url: str, lease: float) -> tuple[str, list[Any]]:
    trusted = [sagas.__name__]
    async with AsyncCoordinator(url, lease_ttl=lease, trusted_modules=trusted) as coord:
        freeze_between_renewals(coord.sync.store)
        report: RecoveryReport = await coord.recover()
        return coord.owner, report.outcomes


def admin_recover(url: str, lease: float) -> None:
    """``saga recover``'s code path, with a short lease."""
    from saga.admin import recover

    with recoverer(url, lease) as coord:
        freeze_between_renewals(coord.store)
        summary = recover(coord)
        print(json.dumps({"owner": coord.owner, **summary.as_json()}), flush=True)


def worker(url: str, lease: float) -> None:
    """``saga worker``'s loop until SIGTERM; its lines on stderr, then all of them as JSON."""
    from saga.admin import run_worker

    stop, lines = threading.Event(), []
    signal.signal(signal.SIGTERM, lambda _number, _frame: stop.set())

    def log(line: str) -> None:
        lines.append(line)
        print(line, file=sys.stderr, flush=True)

    with recoverer(url, lease) as coord:
        freeze_between_renewals(coord.store)
        stats = run_worker(coord, stop, interval=0.05, log=log)
        ended = {"owner": coord.owner, "log": lines, "stats": dataclasses.asdict(stats)}
        print(json.dumps(ended), flush=True)


def own(url: str, book: str, key: str, saga: str, freeze: str, lease: float) -> None:
    data = sagas.how(book, freeze=freeze)
    with Coordinator(url, lease_ttl=lease) as coord:
        try:
            view = coord.run(sagas.SAGAS[saga], data=data, key=key)
            ended: dict[str, Any] = {"status": view.status.value}
        except LeaseLostError as lost:
            ended = {"error": "LeaseLostError", "epoch": lost.epoch}
        except SagaFailed as failed:
            ended = {"status": failed.status.value}
        print(json.dumps(ended), flush=True)


def paused_recover(url: str, paused: str, go: str) -> None:
    from saga.admin import recover

    def progress(item: object, done: int, total: int) -> None:
        del item, total
        if done == 1:  # every saga was read and planned; the next claim waits
            Path(paused).touch()
            _wait_for(Path(go), 60.0)

    with recoverer(url) as coord:
        summary = recover(coord, progress=progress)
        print(json.dumps(summary.as_json()), flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.child")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("seed")
    p.add_argument("url")
    p.add_argument("ledger")
    p.add_argument("count", type=int, help="declarative sagas (faults-3)")
    p.add_argument("--cm", type=int, default=0, help="and context-manager sagas (faults-cm)")
    p.add_argument("--saga", default=sagas.PLAIN.name, help="the declarative sagas' definition")
    p.add_argument("--how", type=json.loads, default={}, help="misbehaviour (JSON) to add")
    p = commands.add_parser("recover")
    p.add_argument("url")
    p.add_argument("--go")
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--once", action="store_true", help="one recover() pass, not until settled")
    p.add_argument("--lease", type=float, default=10.0)
    p.add_argument("--async", dest="use_async", action="store_true", help="one async pass")
    p = commands.add_parser("own")
    p.add_argument("url")
    p.add_argument("ledger")
    p.add_argument("key")
    p.add_argument("--freeze", required=True)
    p.add_argument("--saga", default=sagas.PLAIN.name)
    p.add_argument("--lease", type=float, default=0.5)
    p = commands.add_parser("paused-recover")
    p.add_argument("url")
    p.add_argument("--paused", required=True)
    p.add_argument("--go", required=True)
    for command in ("admin-recover", "worker"):
        p = commands.add_parser(command)
        p.add_argument("url")
        p.add_argument("--lease", type=float, default=10.0)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.command == "seed":
        seed(args.url, args.ledger, args.count, args.cm, args.saga, args.how)
    elif args.command == "recover":
        recover_all(args.url, args.go, args.timeout, args.once, args.lease, args.use_async)
    elif args.command == "admin-recover":
        admin_recover(args.url, args.lease)
    elif args.command == "worker":
        worker(args.url, args.lease)
    elif args.command == "own":
        own(args.url, args.ledger, args.key, args.saga, args.freeze, args.lease)
    else:
        paused_recover(args.url, args.paused, args.go)


if __name__ == "__main__":
    main()
