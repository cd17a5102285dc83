"""Laying out a crash matrix: the points each path reaches, and the cases made of them.

The points are not guessed from the saga's shape: a probe run of each path
(the one that succeeds, and one per step made to fail) in a child process
lists every fault point it passes, in order (``saga._internal.faults.trace``). The
matrix is then every such point, crossed with the modes that mean something
there. The same saga gives the same matrix.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Sequence

from saga.testing.report import Case

MODES = ("recover", "compensate", "zombie", "lost_ack")
"""``recover``: ``coord.recover()`` finishes it (forward where it can);
``compensate``: ``coord.recover(compensate=True)``; ``zombie``: the process is
frozen (SIGSTOP) there instead of killed, recovery finishes the saga, then the
frozen process wakes and must change nothing; ``lost_ack``: the process is not
stopped, but the first commit after the point lands and its answer is lost (the
connection drops between the server's COMMIT and its reply), so the store's retry
must recognise its own write; the saga must end as if nothing had happened."""

_UNWINDING = ("before_unwind", "before_final_commit", "after_final_commit")


@dataclasses.dataclass(frozen=True, slots=True)
class Path:
    """One way through the saga: ``failing`` is the step that fails (``None``: none does);
    ``points`` the ``SAGA_FAULTS`` specs its run reached, in order; ``status`` how it ended."""

    failing: str | None
    points: tuple[str, ...]
    status: str | None


def specs(trace: Iterable[str]) -> tuple[str, ...]:
    """Traced points as ``SAGA_FAULTS`` specs: ``#n`` marks the n-th time (n > 1) a point
    is reached (a retried step passes its points once per attempt)."""
    seen: Counter[str] = Counter()
    out = []
    for point in trace:
        seen[point] += 1
        out.append(point if seen[point] == 1 else f"{point}#{seen[point]}")
    return tuple(out)


def _is_forward(point: str) -> bool:
    name = point.partition(":")[0].partition("#")[0]
    return name not in _UNWINDING and name not in (
        "before_undo",
        "after_undo",
        "after_undo_commit",
        "inside_undo",
    )


def cases(paths: Sequence[Path], modes: Sequence[str]) -> list[Case]:
    """Every (point, mode) worth running, path by path, in execution order.

    ``compensate`` runs only where the saga is still going forward (elsewhere it is
    the same as ``recover``); ``zombie`` only where the saga is recorded and not yet
    final (a process frozen before anything is recorded is just late, not a zombie);
    ``lost_ack`` wherever a commit follows (not once the final commit is made).
    """
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise ValueError(
            f"crash_matrix: unknown mode {unknown[0]!r}; choose from {', '.join(MODES)}"
        )
    out = []
    for path in paths:
        final = _after_final_commit(path)
        for index, point in enumerate(path.points):
            for mode in modes:
                if mode == "compensate" and not (_is_forward(point) and index > 0):
                    continue
                if mode == "zombie" and (index == 0 or index >= final):
                    continue
                if mode == "lost_ack" and index >= final:
                    continue  # no commit follows it
                out.append(Case(point, path.failing, mode))
    return out


def _after_final_commit(path: Path) -> int:
    """The index of the path's first point after its final commit: the points from there
    (the last compensation's end, carried by that commit, and ``after_final_commit``)
    come once the saga is final, with no commit to follow."""
    for index, point in enumerate(path.points):
        name = point.partition("#")[0]
        if name == "before_final_commit":
            return index + 1
        if name == "after_final_commit":
            return index
    return len(path.points)
