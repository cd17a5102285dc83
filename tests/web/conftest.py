"""A database holding sagas in every state, ``saga web`` serving it as a real process,
and a headless Chromium (the system's, driven by its system chromedriver)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.wait import WebDriverWait

from saga import Coordinator, SagaFailed, SagaStatus, admin
from tests import postgres
from tests.cli import steps as cli_steps
from tests.cli.conftest import REPO, crashed, expire, failed_saga, order, saga_command
from tests.web import steps

APPS = (
    *("--app", "tests.cli.steps", "--app", "tests.web.steps"),
    *("--app", "tests.cli.headline_steps", "--app", "tests.cli.forward_steps"),
)
HOSTILE_KEY = "<script>document.title='pwned-key'</script>\x1b[2J\u202e"
HOSTILE_SKU = "<img src=x onerror=\"document.title='pwned-sku'\">"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll ``check`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.05)


def navigate(browser: WebDriver, element: WebElement) -> None:
    """Click ``element`` and wait until the page it leads to has replaced this one."""
    browser.execute_script("window.sagaOldPage = true")  # gone once another page loaded
    element.click()
    WebDriverWait(browser, 30).until(
        lambda b: b.execute_script(
            "return window.sagaOldPage === undefined && document.readyState === 'complete'"
        )
    )


@dataclasses.dataclass(frozen=True)
class World:
    """One saga per state the console must show, on one database."""

    url: str
    completed: str
    compensated: str  # pay retried until it ran out; its refund needed a second attempt
    failed: str  # refund failed for good
    stuck: str  # its process was SIGKILLed inside a step
    cancelled: str
    in_doubt: str  # the pivot's only attempt died; recovery gave it up
    parallel: str
    hostile: str
    blocker: Path


def killed_child(url: str, tmp: Path) -> str:
    """``web-hang`` in a real child process, SIGKILLed inside ``hang``; its lease then expires."""
    ready = tmp / "hang-ready"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-m", "tests.web.child", url, str(ready)], env=env)
    try:
        wait_for("the child to enter its step", ready.exists)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    assert child.returncode == -signal.SIGKILL
    with contextlib.closing(Coordinator(url)) as coord:
        record = coord.store.find(steps.HANG.name, "hang-1")
        assert record is not None
        wait_for("the killed saga to be stuck", lambda: bool(coord.list(stuck=True, key="hang-1")))
        return record.id


def in_doubt_saga(coord: Coordinator, key: str = "doubt-1") -> str:
    """The pivot ``ship`` died on its only attempt; recovery gives it up, outcome unknown."""
    with pytest.raises(cli_steps.SimulatedCrash):
        coord.run(cli_steps.ORDER, data=order(crash_at="ship"), key=key)
    record = coord.store.find(cli_steps.ORDER.name, key)
    assert record is not None
    saga_id = record.id
    expire(coord, saga_id)
    admin.recover(coord, [saga_id])  # only this one: other tests' stuck sagas stay stuck
    assert coord.get(saga_id).status is SagaStatus.FAILED
    return saga_id


def build_world(url: str, tmp: Path) -> World:
    with contextlib.closing(Coordinator(url, lease_ttl=5.0)) as coord:
        completed = coord.run(cli_steps.ORDER, data=order(), key="ok-1").id
        with pytest.raises(SagaFailed) as declined:
            coord.run(steps.FLAKY, data={}, key="flaky-1")
        blocker = tmp / "refund-blocked"
        failed = failed_saga(coord, blocker)
        to_cancel = crashed(coord)
        cancelled = admin.cancel(coord, to_cancel).id
        in_doubt = in_doubt_saga(coord)
        parallel = coord.run(steps.FANOUT, data={}, key="fan-1").id
        hostile = coord.run(cli_steps.ORDER, data=order(sku=HOSTILE_SKU), key=HOSTILE_KEY).id
    stuck = killed_child(url, tmp)
    return World(
        url, completed, declined.value.saga_id, failed, stuck, cancelled, in_doubt, parallel,
        hostile, blocker,
    )  # fmt: skip


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    """Built once per module and backend: the browser tests only read it (actions make
    sagas of their own)."""
    tmp = tmp_path_factory.mktemp("web")
    if request.param == "sqlite":
        yield build_world(f"sqlite:///{tmp}/saga.db", tmp)
        return
    server = request.getfixturevalue("postgres_server")
    with postgres.isolated_schema(server) as url:
        yield build_world(url, tmp)


# -- the server -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclasses.dataclass
class Server:
    """``saga web`` in a child process."""

    base: str
    process: subprocess.Popen[str]
    log: Path

    def stop(self) -> str:
        """Stop it (SIGTERM, as Ctrl-C would) and return everything it wrote."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.log.read_text()


@contextlib.contextmanager
def serving(
    url: str, log: Path, *flags: str, env: dict[str, str] | None = None
) -> Iterator[Server]:
    """``saga --db URL --app ... web --port P FLAGS``, up and answering, stopped afterwards."""
    port = free_port()
    command = [*saga_command(), "--db", url, *APPS, "web", "--port", str(port), *flags]
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    with log.open("w") as output:
        process = subprocess.Popen(
            command, cwd=REPO, env=environment, stdout=output, stderr=output, text=True
        )
    server = Server(f"http://127.0.0.1:{port}", process, log)
    try:
        wait_for(f"saga web on port {port} ({log})", lambda: _answers(server))
        yield server
    finally:
        server.stop()


def _answers(server: Server) -> bool:
    if server.process.poll() is not None:
        raise AssertionError(f"saga web exited: {server.log.read_text()}")
    try:
        return httpx.get(server.base + "/login", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def read_only(world: World, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(world.url, tmp_path_factory.mktemp("log") / "web.log") as server:
        yield server


# -- the browser ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def browser() -> Iterator[webdriver.Chrome]:
    """Headless Chromium from Debian's packages; Selenium is given both paths, so its
    manager has nothing to look for and downloads nothing."""
    for needed in (CHROMIUM, CHROMEDRIVER):
        if not needed.exists():
            pytest.fail(f"{needed} is missing: apt-get install chromium chromium-driver (.ci/run)")
    os.environ["SE_OFFLINE"] = "true"  # belt and braces: never fetch a driver or browser
    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1400,1000", "--disable-gpu"):  # fmt: skip
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
