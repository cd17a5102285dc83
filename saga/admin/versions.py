"""``saga db check``: which definition versions the unfinished sagas still need.

Run it with the new release's ``--app`` before removing an old version's code: a
version listed as missing still has instances that only it can finish.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from saga._internal import versions
from saga._internal.coordinator import Coordinator
from saga._internal.ports import ListQuery, SagaRecord
from saga._internal.status import SagaStatus

IN_FLIGHT = (SagaStatus.RUNNING, SagaStatus.COMPENSATING, SagaStatus.FAILED)
"""Statuses whose sagas still need their definition (a failed one, to retry its
compensation)."""
_PAGE = 500


@dataclasses.dataclass(frozen=True, slots=True)
class VersionInUse:
    """Unfinished instances of one saga version, and whether this process can run them."""

    name: str
    version: int
    fingerprint: str | None
    instances: int
    state: str
    """``ok``; ``missing`` (no such version here); ``changed`` (same version, other
    fingerprint: edited in place)."""
    registered: str | None = None
    """The fingerprint of the version found here, when it differs."""

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, slots=True)
class VersionCheck:
    """Every unfinished declarative saga, grouped by name, version and fingerprint."""

    url: str
    versions: tuple[VersionInUse, ...]

    @property
    def ok(self) -> bool:
        return all(v.state == "ok" for v in self.versions)

    def as_json(self) -> dict[str, Any]:
        return {"url": self.url, "ok": self.ok, "versions": [v.as_json() for v in self.versions]}


def check_versions(coord: Coordinator) -> VersionCheck:
    """Group the unfinished sagas by version and say which have no matching definition."""
    counts: dict[tuple[str, int, str | None], int] = {}
    for record in _in_flight(coord):
        if record.kind != "declarative":  # a context-manager saga needs no definition
            continue
        group = (record.name, versions.record_version(record), record.fingerprint)
        counts[group] = counts.get(group, 0) + 1
    rows = []
    for (name, version, fingerprint), count in sorted(counts.items(), key=_order):
        probe = _probe(name, version, fingerprint)
        saga, _ = versions.lookup(coord.definitions.registry, probe)
        state, registered = "ok", None
        if saga is None:
            state = "missing"
        elif fingerprint is not None and saga.fingerprint != fingerprint:
            state, registered = "changed", saga.fingerprint
        rows.append(VersionInUse(name, version, fingerprint, count, state, registered))
    return VersionCheck(coord.store.url, tuple(rows))


def _in_flight(coord: Coordinator) -> list[SagaRecord]:
    found: list[SagaRecord] = []
    before = None
    while True:  # page by page, newest first, so any number of sagas is read in bounds
        page = coord.store.list(ListQuery(status=IN_FLIGHT, before=before, limit=_PAGE))
        found.extend(page)
        if len(page) < _PAGE:
            return found
        before = page[-1].id


def _order(item: tuple[tuple[str, int, str | None], int]) -> tuple[str, int, str]:
    (name, version, fingerprint), _ = item
    return name, version, fingerprint or ""


def _probe(name: str, version: int, fingerprint: str | None) -> SagaRecord:
    return SagaRecord(
        id="",
        name=name,
        key=None,
        kind="declarative",
        status=SagaStatus.RUNNING,
        input=None,
        version=str(version),
        owner=None,
        epoch=0,
        fingerprint=fingerprint,
    )
