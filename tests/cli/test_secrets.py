"""No credential is printed: a password in the URL's userinfo, in a ``password=`` query
parameter (any case, percent-encoded), in a keyword/value string or in ``$PGPASSWORD``
appears nowhere in what the real ``saga`` script writes: ``db status``, ``db
upgrade``, an error exit, the worker's log in each format, the web console's banner
and its pages."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from urllib.parse import quote, quote_plus

import httpx
import pytest
from sqlalchemy.engine import make_url

from saga._internal import _secrets
from tests.cli.conftest import REPO, run_saga, saga_command
from tests.cli.test_worker_and_demo import _wait_for
from tests.web.conftest import serving

SECRET = "Sekr3t-xq7 p@ss/w"
"""Characters a URL must percent-encode, so its encoded forms are checked too."""
FORMS = (SECRET, quote(SECRET, safe=""), quote(SECRET), quote_plus(SECRET))


def leaks(*texts: str) -> list[str]:
    """The forms of SECRET found in ``texts`` (none, when nothing leaked)."""
    return [form for form in FORMS for text in texts if form in text]


def with_password(url: str, how: str) -> str:
    """``url`` carrying SECRET the way ``how`` says (the test server trusts any password)."""
    parsed = make_url(url)
    if how == "userinfo":
        return parsed.set(password=SECRET).render_as_string(hide_password=False)
    base = parsed.render_as_string(hide_password=False)
    key = {"query": "password", "encoded-key": "pass%77ord"}[how]
    return f"{base}{'&' if parsed.query else '?'}{key}={quote(SECRET, safe='')}"


HOW = ["userinfo", "query", "encoded-key"]


@pytest.mark.postgres
@pytest.mark.parametrize("how", HOW)
def test_db_status_and_upgrade_print_no_password(pg_url: str, how: str, tmp_path: Path) -> None:
    url = with_password(pg_url, how)
    before = run_saga("--db", url, "db", "status", cwd=tmp_path)
    upgraded = run_saga("--db", url, "db", "upgrade", cwd=tmp_path)
    after = run_saga("--db", url, "db", "status", "--json", cwd=tmp_path)
    assert upgraded.returncode == 0, upgraded.stderr
    assert after.returncode == 0, after.stderr
    assert "up to date" in run_saga("--db", url, "db", "status", cwd=tmp_path).stdout
    outputs = [r.stdout + r.stderr for r in (before, upgraded, after)]
    assert leaks(*outputs) == [], outputs
    assert "***" in after.stdout


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql+psycopg://postgres@127.0.0.1:1/x?password={quote(SECRET, safe='')}",
        f"postgresql+psycopg://postgres@127.0.0.1:1/x?PassWord={quote(SECRET, safe='')}",
        f"postgresql+psycopg://postgres:{quote(SECRET, safe='')}@127.0.0.1:1/x",
        f"host=127.0.0.1 port=1 password='{SECRET}'",
    ],
    ids=["query", "key-case", "userinfo", "keyword-value"],
)
@pytest.mark.parametrize("debug", [[], ["--debug"]], ids=["plain", "debug"])
def test_an_error_exit_prints_no_password(url: str, debug: list[str], tmp_path: Path) -> None:
    result = run_saga("--db", url, *debug, "db", "status", cwd=tmp_path)
    assert result.returncode != 0, result.stderr
    assert "saga: error: " in result.stderr
    assert leaks(result.stdout, result.stderr) == [], result.stderr


def test_pgpassword_is_never_printed(tmp_path: Path) -> None:
    """libpq reads $PGPASSWORD; a message that echoed it (here a database named like it,
    the one way to make a driver repeat it) must not show it."""
    url = f"postgresql+psycopg://postgres@127.0.0.1:1/{quote(SECRET, safe='')}"
    result = run_saga("--db", url, "--debug", "db", "status", cwd=tmp_path, env=_pg(SECRET))
    assert result.returncode == 2, result.stderr
    assert leaks(result.stdout, result.stderr) == [], result.stderr


def _pg(password: str) -> dict[str, str]:
    return {"PGPASSWORD": password}


@pytest.mark.postgres
@pytest.mark.parametrize("log_format", [None, "text", "json"])
def test_the_worker_log_prints_no_password(
    pg_url: str, log_format: str | None, tmp_path: Path
) -> None:
    url = with_password(pg_url, "query")
    command = [*saga_command(), "--db", url, "worker", "--interval", "0.1s"]
    command += [] if log_format is None else ["--log-format", log_format]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    worker = subprocess.Popen(
        command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        lines: list[str] = []
        assert worker.stderr is not None
        _wait_for(lambda: "ready" in _line(worker, lines))
        worker.send_signal(signal.SIGTERM)
        out, rest = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate(timeout=30)
    told = "".join(lines) + rest + out
    assert worker.returncode == 0, told
    assert "recovering on postgresql+psycopg://postgres@127.0.0.1" in told
    assert leaks(told) == [], told


def _line(process: subprocess.Popen[str], lines: list[str]) -> str:
    assert process.stderr is not None
    lines.append(process.stderr.readline())
    return lines[-1]


@pytest.mark.postgres
def test_the_web_console_shows_no_password(pg_url: str, tmp_path: Path) -> None:
    url = with_password(pg_url, "query")
    assert run_saga("--db", url, "db", "upgrade", cwd=tmp_path).returncode == 0
    with serving(url, tmp_path / "web.log") as server:
        pages = [httpx.get(server.base + path, timeout=10) for path in ("/", "/saga/nope")]
        banner = server.stop()
    assert "saga web: http://127.0.0.1:" in banner
    assert "password=***" in banner
    assert leaks(banner, *(page.text for page in pages)) == [], banner


# -- the one helper every surface uses ------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+psycopg://u:pw@h/db", "postgresql+psycopg://u:***@h/db"),
        ("postgresql+psycopg://u@h/db?password=pw", "postgresql+psycopg://u@h/db?password=***"),
        (
            "postgresql+psycopg://u@h/db?sslmode=require&PASSWORD=pw&sslpassword=pw",
            "postgresql+psycopg://u@h/db?sslmode=require&PASSWORD=***&sslpassword=***",
        ),
        ("postgresql+psycopg://u@h/db?pass%77ord=pw", "postgresql+psycopg://u@h/db?password=***"),
        ("host=h password='p w\\'x' user=u", "host=h password=*** user=u"),
        ("host=h PASSWORD = pw user=u", "host=h PASSWORD = *** user=u"),
        ("postgresql://u:pw@h:notaport/db", "<unparsable database URL>"),
    ],
)
def test_masked_hides_every_credential_form(url: str, shown: str) -> None:
    assert _secrets.masked(url) == shown


def test_scrub_blanks_each_credential_wherever_a_message_repeats_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PGPASSWORD", "from-env")
    url = f"postgresql+psycopg://u:{quote(SECRET, safe='')}@h/db?password=other"
    text = f"failed for {url}: bad password {SECRET!r}, other, {quote(SECRET)}; from-env"
    scrubbed = _secrets.scrub(text, url)
    assert leaks(scrubbed) == []
    assert "other" not in scrubbed
    assert "from-env" not in scrubbed
    assert "postgresql+psycopg://u:***@h/db?password=***" in scrubbed
