"""The soak's driver: an application process that keeps starting money transfers.

    python -m tests.soak.driver URL BANK_URL JOURNAL --seed S [--threads N] [--lease S] [--drain]

Its threads (a couple of hundred) start transfer after transfer
(``coord.run`` with the key ``t-N`` and the input :func:`tests.soak.plan.planned`
draws for ``N``), their steps taking their planned ``pace`` so that as many
transfers are in flight at once, on a short lease, so that whatever a SIGKILL
leaves behind is soon claimable by the workers. Before each start it appends
``{"begin": N}`` to the journal, and ``{"end": N, "outcome": ...}`` once
``coord.run`` returns or raises; each line is one ``write`` on an ``O_APPEND``
descriptor, so a SIGKILL loses at most the line being written, never a line
written before it.

A driver starting up reads the journal and first re-submits every transfer a
killed predecessor began and never saw end, with the same key and input, as
an application retries its requests after a restart: a transfer already
created is not created twice (a finished one returns its outcome, one that
another process holds is busy, one whose lease ran out is carried on).
SIGTERM stops new starts; the transfers in hand and the re-submissions
finish, then the process exits 0. ``--drain`` starts nothing new at all.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import sys
import threading
import traceback
from types import FrameType

from saga import Coordinator, LeaseLostError, SagaBusyError, SagaFailed
from tests.soak import bank
from tests.soak.plan import planned


class Journal:
    """The driver's begin/end lines, shared by every incarnation of the driver."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def write(self, line: dict[str, object]) -> None:
        with self._lock:
            os.write(self._fd, (json.dumps(line) + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


def read_journal(path: str) -> tuple[list[int], dict[int, str]]:
    """Numbers begun (in order) and outcomes by number; a torn last line is ignored."""
    begun: list[int] = []
    ended: dict[int, str] = {}
    if not os.path.exists(path):
        return begun, ended
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if "begin" in entry:
                begun.append(int(entry["begin"]))
            elif "end" in entry:
                ended[int(entry["end"])] = str(entry["outcome"])
    return begun, ended


class Work:
    """Hands out re-submissions first, then new numbers until stopped."""

    def __init__(self, again: list[int], first_new: int, drain: bool) -> None:
        self.again = collections.deque(again)
        self.next_new = first_new
        self.drain = drain
        self.stop = threading.Event()
        self._lock = threading.Lock()

    def take(self) -> tuple[int, bool] | None:
        """(number, is new), or None when there is nothing more to do."""
        with self._lock:
            if self.again:
                return self.again.popleft(), False
            if self.drain or self.stop.is_set():
                return None
            self.next_new += 1
            return self.next_new - 1, True


def outcome(coord: Coordinator, seed: int, bank_url: str, n: int) -> str:
    """Run transfer ``n`` (again) and say how that went."""
    plan = planned(seed, n, bank_url)
    try:
        view = coord.run(bank.SAGAS[plan.saga], data=plan.data, key=plan.key)
    except SagaFailed as failed:
        return failed.status.value
    except SagaBusyError:
        return "busy"  # another process holds it and finishes it
    except LeaseLostError:
        return "lease lost"  # a worker took it over (this process was too slow to renew)
    except Exception as error:
        sys.stderr.write(f"transfer {n}: {traceback.format_exc()}")
        return f"error: {type(error).__name__}: {error}"
    return view.status.value


def serve(coord: Coordinator, work: Work, journal: Journal, seed: int, bank_url: str) -> None:
    while (job := work.take()) is not None:
        n, new = job
        if new:
            journal.write({"begin": n})
        journal.write({"end": n, "outcome": outcome(coord, seed, bank_url, n)})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.soak.driver")
    parser.add_argument("url")
    parser.add_argument("bank")
    parser.add_argument("journal")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--lease", type=float, default=1.5)
    parser.add_argument("--drain", action="store_true")
    args = parser.parse_args(argv)
    bank.PACED = True

    begun, ended = read_journal(args.journal)
    again = [n for n in begun if n not in ended]
    work = Work(again, max(begun, default=-1) + 1, args.drain)

    def on_sigterm(_number: int, _frame: FrameType | None) -> None:
        work.stop.set()

    signal.signal(signal.SIGTERM, on_sigterm)
    journal = Journal(args.journal)
    print(f"driver {os.getpid()}: re-submitting {len(again)}, next t-{work.next_new}", flush=True)
    with Coordinator(args.url, lease_ttl=args.lease) as coord:
        coord.register(*bank.SAGAS.values())
        threads = [
            threading.Thread(target=serve, args=(coord, work, journal, args.seed, args.bank))
            for _ in range(args.threads)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():  # a timed join lets the SIGTERM handler run
                thread.join(0.2)
    journal.close()
    print(f"driver {os.getpid()}: stopped before t-{work.next_new}", flush=True)


if __name__ == "__main__":
    main()
