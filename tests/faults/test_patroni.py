"""A real failover manager kills nothing it should not: Patroni, etcd, three members.

Three PostgreSQL members under Patroni (tests/faults/patroni_cluster.py),
``synchronous_mode`` on, clients on one multi-host URL with
``target_session_attrs=read-write``. Each round, sagas of every kind run
(declarative, unwinding, context-manager, parallel, transactional, coroutine
ones on an ``AsyncCoordinator``), a process dies with SIGKILL holding more
sagas, and two ``saga worker`` processes recover; at a random moment (after
a random number of the round's sagas ended) the leader's postmaster is killed
with SIGKILL. Patroni promotes the sync standby and the old leader rejoins
with ``pg_rewind``. After every round every saga so far must have ended as
planned, with the crash suite's invariants: no effect applied or undone twice,
no saga driven by two processes at once (a call under a superseded epoch
changes nothing), every saga terminal, nothing at or past a pivot undone,
compensations newest first, attempts within their policy, transactional rows
exactly once.

Two rounds by default; ``SAGA_FAILOVER_LONG=1`` runs six, and the measurement
of what asynchronous replication loses (:func:`test_what_asynchronous_replication_loses`).
The figures (rounds, sagas, failover times, client errors) are printed with
the fault suite's and kept for docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from saga import Coordinator
from tests import postgres
from tests.faults import figures, ha, sagas, workload
from tests.faults.patroni_cluster import Failover, PatroniCluster, patroni_cluster, why_unavailable
from tests.faults.workload import Planned

pytestmark = [
    pytest.mark.faults,
    pytest.mark.postgres,
    pytest.mark.failover_manager,
    pytest.mark.timeout(900),
]

LONG = os.environ.get("SAGA_FAILOVER_LONG") == "1"
ROUNDS = 6 if LONG else 2
SAGAS_A_ROUND = 20
SEEDED_A_ROUND = (4, 2)
"""Declarative and context-manager sagas a killed process leaves to the workers each round."""
OWNER_LEASE = 10.0
SETTLE_LIMIT = 120.0


@pytest.fixture
def cluster_maker() -> Callable[[bool], contextlib.AbstractContextManager[PatroniCluster]]:
    reason = why_unavailable()
    if reason is not None:
        if postgres.required():
            pytest.fail(f"{reason}; {postgres.ENV_REQUIRED}=1 requires the Patroni tests")
        pytest.skip(reason)
    return patroni_cluster


def _rewinds(cluster: PatroniCluster) -> int:
    return sum(
        member.log.read_text(errors="replace").count("pg_rewind exit code=0")
        for member in cluster.members
    )


class Rounds:
    """The rounds of one test: what each planned, how its failover went, the figures."""

    def __init__(self, cluster: PatroniCluster, book: str, where: Path, seed: int) -> None:
        self.cluster = cluster
        self.url = cluster.url()
        self.book = book
        self.where = where
        self.rng = random.Random(seed)
        self.planned: list[Planned] = []
        self.failovers: list[Failover] = []
        self.lease_lost = 0

    def one(self, number: int, coord: Coordinator, aside: workload.AsyncSide) -> None:
        prefix = f"r{number}"
        count, cm = SEEDED_A_ROUND
        workload.seed(self.url, self.book, count, self.where, cm=cm, prefix=f"{prefix}-seed")
        seeded = workload.seeded_plans(self.book, count, cm, prefix=f"{prefix}-seed")
        kinds = workload.EVERY_KIND
        planned = workload.plan(self.book, SAGAS_A_ROUND, prefix, kinds=kinds, nap=0.05)
        runners = workload.Runners(coord, workload.in_threads(planned, 4), aside).start()
        ha.wait_for_more(runners, self.rng.randint(1, SAGAS_A_ROUND // 2))
        self.failovers.append(self.cluster.kill_leader())
        runners.join(timeout=180)
        assert runners.errors == [], runners.errors
        self.lease_lost += runners.outcomes.count("lease lost")
        ha.wait_until(lambda: ha.unfinished(coord) == 0, "every saga terminal", SETTLE_LIMIT)
        self.planned += seeded + planned
        workload.check_settled(coord, self.url, self.book, self.planned)

    def report(self, client_errors: int, worker_errors: int) -> None:
        """The figures of the run, for the summary and docs/reliability.md."""
        writable = [f.writable_after for f in self.failovers]
        rejoined = [f.rejoined_after for f in self.failovers]
        counts = {
            "leaders' postmasters killed with SIGKILL": len(writable),
            "sagas checked after every round": len(self.planned),
            "connection errors the test's stores retried": client_errors,
            "worker log lines of a pass that failed": worker_errors,
            "sagas taken over by a worker": self.lease_lost,
            "pg_rewind runs that succeeded (old leader rejoining)": _rewinds(self.cluster),
        }
        for name, amount in counts.items():
            figures.count(f"Patroni failover: {name}", amount)
        rounds = ", ".join(
            f"{f.killed}->{f.promoted} {f.writable_after:.1f} s / {f.rejoined_after:.1f} s"
            for f in self.failovers
        )
        figures.note(
            f"Patroni failover, {len(self.failovers)} rounds, {len(self.planned)} sagas: "
            f"kill to writable {min(writable):.1f}-{max(writable):.1f} s, kill to rejoined "
            f"{min(rejoined):.1f}-{max(rejoined):.1f} s (per round: {rounds})"
        )


def test_sagas_survive_repeated_patroni_failovers(
    cluster_maker: Callable[[bool], contextlib.AbstractContextManager[PatroniCluster]],
    ledger_path: str,
    tmp_path: Path,
) -> None:
    with cluster_maker(True) as cluster:
        url = cluster.url()
        sagas.create_effects_table(url)
        rounds = Rounds(cluster, ledger_path, tmp_path, seed=random.randrange(2**32))
        with (
            ha.counting_unavailable() as errors,
            Coordinator(url, lease_ttl=OWNER_LEASE, trusted_modules=[sagas.__name__]) as coord,
        ):
            coord.create_schema()
            with ha.workers(url, tmp_path) as logs, workload.AsyncSide(url, OWNER_LEASE) as aside:
                for number in range(ROUNDS):
                    rounds.one(number, coord, aside)
            worker_errors = ha.worker_errors(logs)
        rounds.report(len(errors), worker_errors)
