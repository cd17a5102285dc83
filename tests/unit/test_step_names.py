"""A context-manager saga's step names stay distinct without a unique index (schema
revision 0003): repeated names are numbered, skipping numbers an explicit name took."""

from __future__ import annotations

from saga.adapters.memory import InMemorySagaStore

from saga import Coordinator


def debit(amount: int) -> int:
    return amount


def test_repeated_and_explicit_names_never_collide() -> None:
    with Coordinator(store=InMemorySagaStore()) as coord:
        with coord.saga("names", key="k") as s:
            s.step(debit, 1, step_name="debit#2")
            s.step(debit, 2)
            s.step(debit, 3)
            s.step(debit, 4, step_name="debit#2")
        names = [step.name for step in coord.get(s.id).steps]
    assert names == ["debit#2", "debit", "debit#3", "debit#2#2"]
    assert len(set(names)) == len(names)
