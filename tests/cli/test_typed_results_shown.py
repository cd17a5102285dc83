"""A result whose type's validator raises breaks neither the read API nor the real
``saga list`` and ``saga show``: they show the JSON as stored and the error (issue 28,
defect 2). The command loads the type with ``--app``, as an operator's would."""

from __future__ import annotations

import json
from pathlib import Path

from saga import Coordinator, SagaStatus
from tests.cli import typed_steps
from tests.cli.conftest import run_saga

APP = "tests.cli.typed_steps"
ERROR = "reading it raised LookupError: the catalogue service is down"


def _poisoned(db_url: str) -> str:
    with Coordinator(db_url) as coord:
        saga_id = coord.run(typed_steps.POISONED).id
        view = coord.get(saga_id)  # the read API: no exception, the stored JSON
        assert view.status is SagaStatus.COMPLETED
        assert view.results["make_poison"] == {"sku": "poison"}
        assert ERROR in (view.step("make_poison").result_error or "")
        (listed,) = coord.list(name="cli-poisoned")
        assert listed.step("make_poison").result == {"sku": "poison"}
    return saga_id


def test_saga_list_and_show_show_the_stored_json_and_the_error(db_url: str, tmp_path: Path) -> None:
    saga_id = _poisoned(db_url)
    listed = run_saga("--db", db_url, "--app", APP, "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert saga_id in listed.stdout
    shown = run_saga("--db", db_url, "--app", APP, "show", saga_id, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert '{"sku":"poison"}' in shown.stdout
    assert "step make_poison: result shown as stored JSON: result of step 'make_poison'" in (
        shown.stdout
    )
    assert ERROR in shown.stdout.replace("\n", " ")
    as_json = run_saga("--db", db_url, "--app", APP, "show", saga_id, "--json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    (step,) = json.loads(as_json.stdout)["steps"]
    assert step["result"] == {"sku": "poison"}
    assert ERROR in step["result_error"]
