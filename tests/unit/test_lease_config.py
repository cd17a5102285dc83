"""A lease ttl that cannot work is refused where it is given, with what to pass instead.

Zero or a negative ttl made every saga claimable from its first write (a
recoverer ran the owner's step a second time, at once) and spun the heartbeat;
NaN and infinity compare false with everything. The library refuses them, and
absurd values, in ``Coordinator`` and ``AsyncCoordinator`` before anything is
opened; the worker's ``--lease-ttl`` goes through the same check.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from saga.adapters.memory import InMemorySagaStore

from saga import AsyncCoordinator, ConfigurationError, Coordinator
from saga._internal.lease import (
    MAX_LEASE_TTL,
    MIN_LEASE_TTL,
    Heartbeat,
    check_lease_ttl,
    renewal_interval,
)

REFUSED = [
    (0, "lease_ttl must be positive and finite, not 0"),
    (0.0, "lease_ttl must be positive and finite, not 0.0"),
    (-5, "lease_ttl must be positive and finite, not -5"),
    (math.nan, "lease_ttl must be positive and finite, not nan"),
    (math.inf, "lease_ttl must be positive and finite, not inf"),
    (-math.inf, "lease_ttl must be positive and finite, not -inf"),
    (0.05, "lease_ttl 0.05s is out of range"),
    (86_401, "lease_ttl 86401s is out of range"),
    (1e12, "lease_ttl 1e+12s is out of range"),
    ("30", "lease_ttl must be a number of seconds, not '30'"),
    (True, "lease_ttl must be a number of seconds, not True"),
]
WHAT_TO_DO = "pass a number of seconds from 0.1 to 86400 (one day)"


@pytest.mark.parametrize(("ttl", "message"), REFUSED)
def test_a_coordinator_refuses_a_lease_ttl_that_cannot_work(
    ttl: object, message: str, tmp_path: Path
) -> None:
    database = tmp_path / "saga.db"
    with pytest.raises(ConfigurationError) as refused:
        Coordinator(f"sqlite:///{database}", lease_ttl=ttl)  # type: ignore[arg-type]
    assert message in str(refused.value)
    assert WHAT_TO_DO in str(refused.value)
    assert not database.exists()  # refused before the store was opened


@pytest.mark.parametrize(("ttl", "message"), REFUSED)
def test_an_async_coordinator_refuses_it_too(ttl: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match="lease_ttl") as refused:
        AsyncCoordinator(store=InMemorySagaStore(), lease_ttl=ttl)  # type: ignore[arg-type]
    assert message in str(refused.value)


def test_a_heartbeat_refuses_it_too() -> None:
    with pytest.raises(ConfigurationError, match="positive"):
        Heartbeat(InMemorySagaStore(), 0.0)


@pytest.mark.parametrize("ttl", [MIN_LEASE_TTL, 0.3, 30, 30.0, MAX_LEASE_TTL])
def test_the_bounds_and_ordinary_values_are_accepted(ttl: float) -> None:
    with Coordinator(store=InMemorySagaStore(), lease_ttl=ttl) as coord:
        assert coord.lease_ttl == ttl
        assert isinstance(coord.lease_ttl, float)
        assert coord.heartbeat.lease_ttl == ttl


@pytest.mark.parametrize("ttl", [MIN_LEASE_TTL, 1.0, 30.0, MAX_LEASE_TTL])
def test_the_heartbeat_renews_well_inside_every_accepted_lease(ttl: float) -> None:
    heartbeat = Heartbeat(InMemorySagaStore(), ttl)
    assert heartbeat.interval == renewal_interval(ttl)
    assert 0 < heartbeat.interval <= ttl / 3


def test_the_check_names_the_setting_it_is_given_for() -> None:
    with pytest.raises(ConfigurationError, match=r"^--lease-ttl must be positive"):
        check_lease_ttl(0.0, "--lease-ttl")


def test_no_lease_given_means_the_environment_or_thirty_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SAGA_LEASE_TTL", raising=False)
    with Coordinator(store=InMemorySagaStore(), lease_ttl=None) as coord:
        assert coord.lease_ttl == 30.0
