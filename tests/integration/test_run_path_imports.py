"""Running a declarative saga loads only what running it needs.

The block API (``with coord.saga(...)``), the schema migrations (a database already at
this release's revision), the log formatters and event wording (logs off), the
recoverer's reports and the operator's identity are imported on first use. This keeps
``import saga`` and a worker's or a CLI's start cheap, and it is what the run path
figure in docs/architecture.md counts. Each module here is checked in a fresh
interpreter, on a real SQLite file that a first process created.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

NOT_LOADED_BY_A_RUN = (
    "saga._internal.scope",
    "saga._internal.engine.scope",
    "saga._internal.engine.scope_flows",
    "saga._internal.engine.group",
    "saga.adapters.sql.migrate",
    "saga.adapters.sql.shapes",
    "saga._internal.wording",
    "saga._internal.recovery",
    "saga._internal.operator_identity",
    "saga._internal.aio",
    "saga.logs",
)

_RUN = """
import json, sys
from saga import Coordinator, Saga

order = Saga("place-order")

@order.step()
def reserve(ctx):
    return {"reservation": 1}

@order.step()
def charge(ctx):
    return {"charge": 1}

coord = Coordinator(sys.argv[1])
coord.run(order, data={}, key=sys.argv[2])
print(json.dumps(sorted(sys.modules)))
"""


def _loaded_by_a_run(url: str, key: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", _RUN, url, key], capture_output=True, text=True, check=True
    )
    return set(json.loads(done.stdout))


@pytest.fixture(scope="module")
def second_run(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('run-path') / 'saga.db'}"
    first = _loaded_by_a_run(url, "first")  # creates the tables: migrations run here
    assert "saga.adapters.sql.migrate" in first
    return _loaded_by_a_run(url, "second")


@pytest.mark.parametrize("module", NOT_LOADED_BY_A_RUN)
def test_a_declarative_run_does_not_load(second_run: set[str], module: str) -> None:
    assert module not in second_run


def test_the_run_did_load_the_engine_and_the_store(second_run: set[str]) -> None:
    # The check above would pass vacuously if the child imported nothing of saga's.
    assert {"saga._internal.engine.forward", "saga.adapters.sql.sqlite"} <= second_run


def one() -> int:
    return 1


def test_the_block_api_loads_on_first_use(tmp_path: Path) -> None:
    from saga import Coordinator, SagaScope, SagaStatus

    coord = Coordinator(f"sqlite:///{tmp_path / 'saga.db'}")
    with coord.saga("block", key="k") as scope:
        assert isinstance(scope, SagaScope)
        assert scope.step(one) == 1
    assert coord.get(scope.id).status is SagaStatus.COMPLETED
