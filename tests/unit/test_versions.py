"""Versions of one saga side by side, on the in-memory store: which version runs,
resumes and is refused."""

from __future__ import annotations

import uuid

import pytest
from saga.adapters.memory import InMemorySagaStore

from saga import Coordinator, DefinitionError, Saga, SagaStatus, StepContext, admin
from tests.unit.test_coordinator_memory import Clock, PowerCut

calls: list[str] = []


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> InMemorySagaStore:
    memory = InMemorySagaStore()
    monkeypatch.setattr(memory, "now", clock)
    calls.clear()
    return memory


def _versions(name: str, crash_v1: bool = False) -> tuple[Saga, Saga]:
    """v1: a, b. v2: a, extra, b. v1's b dies (PowerCut) when ``crash_v1``."""
    made = []
    for version, names in ((1, ["a", "b"]), (2, ["a", "extra", "b"])):
        saga = Saga(name, version=version)
        for step in names:

            def act(ctx: StepContext, step: str = step, version: int = version) -> str:
                if crash_v1 and version == 1 and step == "b" and not calls.count("revived"):
                    raise PowerCut
                calls.append(f"v{version}-{step}")
                return step

            saga.step(name=step)(act)
        made.append(saga)
    return made[0], made[1]


def test_a_new_run_takes_the_newest_registered_version(store: InMemorySagaStore) -> None:
    v1, v2 = _versions(f"pay-{uuid.uuid4().hex[:8]}")
    with Coordinator(store=store) as coord:
        coord.register(v2, v1)
        assert coord.run(v1.name, key="k1").version == 2
        assert coord.run(v1, key="k2").version == 1  # an explicit definition is honoured
    assert calls == ["v2-a", "v2-extra", "v2-b", "v1-a", "v1-b"]


def test_an_instance_is_recovered_by_the_version_it_started_with(
    store: InMemorySagaStore, clock: Clock
) -> None:
    v1, v2 = _versions(f"pay-{uuid.uuid4().hex[:8]}", crash_v1=True)
    with Coordinator(store=store, lease_ttl=5.0) as old, pytest.raises(PowerCut):
        old.run(v1, key="k")
    calls.append("revived")
    clock.advance(6)
    with Coordinator(store=store, lease_ttl=5.0) as new:
        new.register(v1, v2)
        [outcome] = new.recover().outcomes
        assert outcome.status is SagaStatus.COMPLETED
        view = new.get(outcome.saga_id)
        assert (view.version, view.fingerprint) == (1, v1.fingerprint)
        assert new.run(v1.name, key="k").version == 1  # a rerun by key: the recorded one
    assert calls == ["v1-a", "revived", "v1-b"]


def test_a_missing_or_edited_version_is_refused_naming_both(
    store: InMemorySagaStore, clock: Clock
) -> None:
    name = f"pay-{uuid.uuid4().hex[:8]}"
    v1, _ = _versions(name, crash_v1=True)
    with Coordinator(store=store, lease_ttl=5.0) as old, pytest.raises(PowerCut):
        old.run(v1, key="k")
    saga_id = old.list()[0].id
    record = store.load(saga_id)
    assert record is not None
    from saga._internal import definition

    del definition._catalog[(name, 1)]  # this "process" never imported v1
    clock.advance(6)
    with Coordinator(store=store, lease_ttl=5.0) as new:
        with pytest.raises(DefinitionError, match=r"version 1, which .* \(it has v2\)"):
            new.started_with(record)
        [row] = admin.check_versions(new).versions
        assert (row.version, row.state, row.instances) == (1, "missing", 1)
        edited = Saga(name, version=1)  # v1 "edited in place": another step added
        for step in ("a", "audit", "b"):
            edited.step(name=step)(lambda ctx: None)
        new.register(edited)
        with pytest.raises(DefinitionError, match="its steps changed in place"):
            new.started_with(record)
        assert admin.check_versions(new).versions[0].state == "changed"
        assert new.get(saga_id).status is SagaStatus.RUNNING
