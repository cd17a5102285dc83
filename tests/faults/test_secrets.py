"""A database password never leaves the URL it came in.

With a password in the PostgreSQL URL (the test server trusts every
connection, so any password works), sagas run, fail, unwind and recover, an
unreachable server is reported, and the admin command reads and acts, with
and without ``--json`` and ``--debug``. The password must appear in none of:
the ``saga`` logger's records (at DEBUG), exception messages and
tracebacks, the coordinator's repr, stored events or rows, and the admin
command's stdout and stderr.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

from saga import Coordinator, RetryPolicy, SagaFailed, StorageUnavailableError
from tests.children import ROOT, child_env
from tests.faults import figures, sagas
from tests.faults.dump import dump

pytestmark = [pytest.mark.faults, pytest.mark.postgres]

PASSWORD = "S3cret-pa55w0rd-7f3a"
QUICK = RetryPolicy(
    max_attempts=3, initial_delay=0.01, max_delay=0.02, retry_on=(StorageUnavailableError,)
)
SAGA = str(Path(sys.executable).parent / "saga")


def _with_password(url: str) -> str:
    user, _, rest = url.partition("@")
    return f"{user}:{PASSWORD}@{rest}"


def _unreachable(url: str) -> str:
    _, _, rest = _with_password(url).partition("@")
    return _with_password(url).replace(rest.split("/", 1)[0], "127.0.0.1:1", 1)


def _clean(text: str, where: str) -> None:
    assert PASSWORD not in text, f"the password appears in {where}: ...{text[-300:]}"
    figures.count("places checked for the password")


def test_the_password_appears_in_no_log_error_event_or_repr(
    pg_url: str, ledger_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = _with_password(pg_url)
    with Coordinator(url, lease_ttl=2.0, store_retry=QUICK) as coord:
        _clean(repr(coord) + coord.store.url, "the coordinator's repr")
        coord.run(sagas.PLAIN, data=sagas.how(ledger_path), key="ok")
        with pytest.raises(SagaFailed):
            coord.run(sagas.PLAIN, data=sagas.how(ledger_path, fail="s2"), key="unwound")
        coord.recover()
        for view in coord.list():
            _clean(repr(coord.history(view.id)), "stored events")
    _clean(repr(dump(url)), "stored rows")
    with Coordinator(_unreachable(pg_url), store_retry=QUICK) as down:
        with pytest.raises(StorageUnavailableError) as raised:
            down.run(sagas.PLAIN, data=sagas.how(ledger_path), key="never")
        _clean(repr(down), "the repr of a coordinator on an unreachable server")
    _clean("".join(traceback.format_exception(raised.value)), "the error and its causes")
    _clean("\n".join(r.getMessage() for r in caplog.records), "log records")


def _saga(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SAGA, *args], cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=90
    )


def test_the_admin_command_never_prints_the_password(pg_url: str, ledger_path: str) -> None:
    with Coordinator(pg_url) as first:  # the admin command creates no tables: the app does
        first.create_schema()
    probe = _saga("--db", pg_url, "list")
    assert probe.returncode == 0, probe.stderr  # never a skip: the command must work here
    url = _with_password(pg_url)
    with Coordinator(url) as coord:
        done = coord.run(sagas.PLAIN, data=sagas.how(ledger_path), key="shown")
    commands = [
        ["--json", "list"],
        ["show", done.id],
        ["--debug", "history", done.id],
        ["--json", "recover", "--dry-run"],
        ["--debug", "show", "no-such-saga"],
        ["--json", "compensate", done.id],
        ["db", "upgrade"],
    ]
    for command in commands:
        ran = _saga("--db", url, *command)
        _clean(ran.stdout + ran.stderr, f"saga {' '.join(command)}")
        assert ran.returncode == 0 or command[-1] in ("no-such-saga", done.id), ran.stderr
    down = _saga("--db", _unreachable(pg_url), "--debug", "list")  # with a traceback
    assert down.returncode != 0
    _clean(down.stdout + down.stderr, "saga --debug list (server unreachable)")
