"""The ASGI application: routes, the token and CSRF checks, errors as one line.

Every page is a read through :mod:`saga.admin`, run in a worker thread (the
coordinator is synchronous). GET never changes anything; the actions are
POSTs, offered only when the console was started with them allowed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs, quote, urlsplit

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from saga import admin
from saga._internal.coordinator import Coordinator
from saga._internal.errors import (
    ConfigurationError,
    SagaError,
    SagaHandedBack,
    StorageUnavailableError,
    UnknownSagaError,
)
from saga._internal.explanation import explain, scrub
from saga._internal.ports import DEFAULT_LIST_LIMIT
from saga.web import actions, bulk_page, saga_page
from saga.web.list_page import COUNT_CAP, Filters, list_page
from saga.web.markup import ROOT
from saga.web.pages import diff_page, error_page, login_page
from saga.web.security import COOKIE, Guard, is_loopback

Endpoint = Callable[[Request], Awaitable[Response]]
_HEADERS = {
    # Pages hold no script of ours that needs more than inline styles; nothing may frame them.
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'self'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


class Console:
    """The routes' shared state: the coordinator, what is allowed, the guard."""

    def __init__(
        self, coord: Coordinator, *, allow_actions: bool, token: str | None, host: str | None
    ) -> None:
        self.coord = coord
        self.allow_actions = allow_actions
        self.guard = Guard(token)
        self.host = host

    def html(self, body: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(body, status, headers=_HEADERS)

    def failure(self, error: Exception) -> HTMLResponse:
        """An error as the CLI's one line, with the status code that fits it."""
        _, line = explain(error)
        status = 500
        if isinstance(error, UnknownSagaError):
            status = 404
        elif isinstance(error, ConfigurationError):
            status = 400
        elif isinstance(error, StorageUnavailableError):
            status = 503
        elif line.startswith("refused: "):
            status = 409
        return self.html(error_page(self.scrubbed(line)), status)

    def scrubbed(self, line: str) -> str:
        return " ".join(scrub(line, self.coord.store.url).split())

    # -- pages ------------------------------------------------------------------------------

    async def sagas(self, request: Request) -> Response:
        filters = _filters(request)
        counts = await run_in_threadpool(admin.status_counts, self.coord, COUNT_CAP)
        try:
            result = await run_in_threadpool(self._page, filters, request)
        except (ConfigurationError, UnknownSagaError) as error:
            problem = self.scrubbed(explain(error)[1])
            return self.html(list_page(None, counts, filters, problem), 400)
        given = any((filters.statuses, filters.name, filters.key, filters.stuck, filters.age))
        bulk = bulk_page.bulk_links(filters, list(admin.VERBS)) if given else ""
        return self.html(
            list_page(result, counts, filters, bulk=bulk if self.allow_actions else "")
        )

    def _page(self, filters: Filters, request: Request) -> admin.SagaPage:
        age = filters.age.strip()
        return admin.list_sagas(
            self.coord,
            statuses=admin.parse_statuses(filters.statuses),
            name=filters.name or None,
            key=filters.key or None,
            stuck=filters.stuck,
            older_than=admin.parse_duration(age, "older than") if age else None,
            limit=filters.limit,
            before=request.query_params.get("before") or None,
        )

    async def saga(self, request: Request) -> Response:
        done = request.query_params.get("done")
        return await self._saga(request.path_params["saga_id"], saga_page.Extras(), done=done)

    async def _saga(
        self,
        saga_id: str,
        extras: saga_page.Extras,
        status: int = 200,
        done: str | None = None,
    ) -> Response:
        """The saga page; ``done`` (a verb) is said done only if its history, read now,
        holds the console's recent record of it."""

        def read() -> str:
            detail, history = admin.show_with_history(self.coord, saga_id)
            events = [entry.event for entry in history.entries]
            notice = actions.done_notice(done, events, detail.now)
            found = admin.waiting(self.coord, detail.saga.id) if notice else None
            if notice and found is not None:  # done, and its compensation now waits: no error
                notice = f"{notice}; {found.text}"
            verbs = [(v.name, v.label) for v in actions.VERBS.values()]
            offered = verbs if self.allow_actions else None
            shown = saga_page.Extras(offered, notice, extras.error)
            return saga_page.saga_page(detail, history, shown)

        return self.html(await run_in_threadpool(read), status)

    async def diff(self, request: Request) -> Response:
        left = request.query_params.get("left", "")
        right = request.query_params.get("right", "")
        result = await run_in_threadpool(admin.diff_sagas, self.coord, left, right)
        return self.html(diff_page(result))

    # -- actions ----------------------------------------------------------------------------

    async def confirm(self, request: Request) -> Response:
        verb = self._verb(request)
        view = await run_in_threadpool(admin.get_saga, self.coord, request.path_params["saga_id"])
        return self.html(actions.confirm_page(view, verb, self.guard.csrf()))

    async def act(self, request: Request) -> Response:
        verb = self._verb(request)
        form = await _form(request)
        if not self.guard.csrf_ok(form.get("csrf", "")):
            return self.html(error_page("the form is stale or forged (CSRF check); reload it"), 403)
        saga_id = request.path_params["saga_id"]
        client = request.client.host if request.client else None
        try:
            view = await run_in_threadpool(actions.perform, self.coord, verb, saga_id, form, client)
        except SagaError as error:  # refused, or bad input: the saga page says why
            if not (isinstance(error, SagaHandedBack) and error.waiting):
                extras = saga_page.Extras(error=self.scrubbed(explain(error)[1]))
                status = 400 if isinstance(error, ConfigurationError) else 409
                return await self._saga(saga_id, extras, status)
            # Done: its compensation failed again and waits for a worker, which the saga
            # page says as a notice, not an error.
            shown = error.saga_id
        else:
            shown = view.id
        where = f"{ROOT.get()}/saga/{quote(shown, safe='')}?done={verb.name}"
        return RedirectResponse(where, 303, headers=_HEADERS)

    async def bulk_confirm(self, request: Request) -> Response:
        verb = self._bulk_verb(request)
        filters = _filters(request)
        report = await run_in_threadpool(bulk_page.planned, self.coord, verb, filters)
        return self.html(bulk_page.confirm_page(verb, report, filters, self.guard.csrf()))

    async def bulk_act(self, request: Request) -> Response:
        verb = self._bulk_verb(request)
        form = await _form(request)
        if not self.guard.csrf_ok(form.get("csrf", "")):
            return self.html(error_page("the form is stale or forged (CSRF check); reload it"), 403)
        reason, user = form.get("reason", "").strip(), form.get("operator", "").strip()
        if not user or not reason:
            raise ConfigurationError("say who you are and why: both are recorded with the action")
        client = request.client.host if request.client else "unknown"
        who = {"source": "web", "by": user, "reason": reason, "client": client}
        filters = bulk_page.filters_of(form)
        options = bulk_page.options_of(verb, form)
        report = await run_in_threadpool(bulk_page.acted, self.coord, verb, filters, who, options)
        return self.html(bulk_page.report_page(report), 200 if report.ok else 409)

    def _bulk_verb(self, request: Request) -> str:
        if not self.allow_actions:
            raise ReadOnly
        verb = str(request.path_params["verb"])
        if verb not in admin.VERBS:
            raise ConfigurationError(f"no action {verb!r} on many; one of {', '.join(admin.VERBS)}")
        return verb

    def _verb(self, request: Request) -> actions.Verb:
        if not self.allow_actions:
            raise ReadOnly
        verb = actions.VERBS.get(request.path_params["verb"])
        if verb is None:
            raise ConfigurationError(
                f"no action {request.path_params['verb']!r}; one of {', '.join(actions.VERBS)}"
            )
        return verb

    # -- the token --------------------------------------------------------------------------

    async def login(self, request: Request) -> Response:
        if request.method == "GET":
            return self.html(login_page())
        form = await _form(request)
        if not self.guard.token_matches(form.get("token", "")):
            return self.html(login_page("wrong token"), 401)
        response = RedirectResponse(_local(form.get("next", "/")), 303, headers=_HEADERS)
        if self.guard.token is not None:
            response.set_cookie(
                COOKIE, self.guard.session_value, httponly=True, samesite="strict", path="/"
            )
        return response

    def gate(self, endpoint: Endpoint, *, public: bool = False) -> Endpoint:
        """``endpoint`` behind the host and token checks (``public``: the host check only),
        its errors made into pages."""

        async def gated(request: Request) -> Response:
            ROOT.set(request.scope.get("root_path", "").rstrip("/"))
            if not self._host_ok(request):
                return self.html(error_page("unexpected Host header"), 421)
            if not public and not self.guard.admits(request):
                return self.html(login_page(next_path=request.url.path), 401)
            try:
                return await endpoint(request)
            except ReadOnly:
                message = "read-only: start `saga web --allow-actions` to act on sagas from here"
                return self.html(error_page(message), 403)
            except Exception as error:  # noqa: BLE001 - every error becomes one line, never a trace
                return self.failure(error)

        return gated

    def _host_ok(self, request: Request) -> bool:
        """Without a token only local names are served: a page of another site whose
        name resolves to 127.0.0.1 (DNS rebinding) must not read the sagas."""
        if self.guard.token is not None:
            return True
        host = urlsplit(f"//{request.headers.get('host', '')}").hostname or ""
        return is_loopback(host) or host == self.host


class ReadOnly(Exception):  # noqa: N818 - a signal, not an error the user sees as such
    """An action was asked of a console started without ``--allow-actions``."""


def _filters(request: Request) -> Filters:
    params = request.query_params
    try:
        limit = max(1, min(500, int(params.get("limit") or DEFAULT_LIST_LIMIT)))
    except ValueError:
        limit = DEFAULT_LIST_LIMIT
    return Filters(
        statuses=tuple(params.getlist("status")),
        name=params.get("name", ""),
        key=params.get("key", ""),
        stuck=params.get("stuck") == "1",
        age=params.get("age", ""),
        limit=limit,
    )


MAX_FORM_BYTES = 64 * 1024
"""Our forms hold a name, a reason and a step: anything bigger is not one of them."""


async def _form(request: Request) -> dict[str, str]:
    """A urlencoded form body (the only kind our pages send), last value of each field."""
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_FORM_BYTES:
            raise ConfigurationError(f"the form is larger than {MAX_FORM_BYTES} bytes")
    body = raw.decode("utf-8", errors="replace")
    return {name: values[-1] for name, values in parse_qs(body, keep_blank_values=True).items()}


def _local(path: str) -> str:
    """Only a path on this site is followed after login (no open redirect)."""
    return path if path.startswith("/") and not path.startswith("//") else "/"


def app(
    coord: Coordinator,
    *,
    allow_actions: bool = False,
    token: str | None = None,
    host: str | None = None,
) -> Starlette:
    """The web console over ``coord``, as an ASGI app to serve or mount.

    Read-only unless ``allow_actions``. With ``token``, every request must
    carry it (``Authorization: Bearer``, or the cookie the login form sets).
    ``host`` is the address it is served on, accepted as a Host header.
    """
    console = Console(coord, allow_actions=allow_actions, token=token, host=host)
    g = console.gate
    routes = [
        Route("/", g(console.sagas)),
        Route("/saga/{saga_id}", g(console.saga)),
        Route("/saga/{saga_id}/confirm/{verb}", g(console.confirm)),
        Route("/saga/{saga_id}/action/{verb}", g(console.act), methods=["POST"]),
        Route("/bulk/confirm/{verb}", g(console.bulk_confirm)),
        Route("/bulk/action/{verb}", g(console.bulk_act), methods=["POST"]),
        Route("/diff", g(console.diff)),
        Route("/login", g(console.login, public=True), methods=["GET", "POST"]),
    ]
    return Starlette(routes=routes)
