"""A web console for sagas: a list, a timeline per saga, a diff, and (when
allowed) the operator actions, all read through :mod:`saga.admin`.

Serve it with ``saga web`` (extra ``saga[web]``), or mount it in an ASGI app
of your own::

    from saga import Coordinator
    from saga.web import app

    console = app(Coordinator("sqlite:///saga.db"))   # read-only
    # e.g. Starlette(routes=[Mount("/sagas", app=console)])

The modules behind this one::

    server     the Starlette app: routes, token and CSRF checks, errors
    list_page  the list: filters, counts per status, paging
    saga_page  one saga: header, summary, timeline, steps, history, actions
    timeline   bars from the history (pure), drawn as SVG
    actions    the operator verbs, recorded with "web" as their source
    pages      diff, login, error pages
    markup     escaping and the page layout
    security   token, session cookie and CSRF
"""

from saga.web.server import app

__all__ = ["app"]
