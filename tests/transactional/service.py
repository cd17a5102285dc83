"""A scripted HTTP service on 127.0.0.1 for the HTTP helper's tests (http.server in a thread).

``answers`` holds, per path, the statuses still to give (then 200); every
request is kept in ``requests`` with its method, path and headers. ``GET``
of a path the service never saw a ``POST`` for answers 404.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Service:
    def __init__(self) -> None:
        self.answers: dict[str, deque[int]] = defaultdict(deque)
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.created: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def script(self, path: str, *statuses: int) -> None:
        self.answers[path].extend(statuses)

    def __enter__(self) -> Service:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _answer(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, Any]:
        with self.lock:
            self.requests.append((method, path, headers))
            queue = self.answers[path]
            status = queue.popleft() if queue else 200
            if status != 200:
                return status, {"error": f"scripted {status}"}
            if method == "POST":
                key = headers.get("idempotency-key", "")
                self.created.setdefault(key, {"id": len(self.created) + 1, "key": key})
                return 200, self.created[key]
            found = self.created.get(path.rsplit("/", 1)[-1])
            return (200, found) if found else (404, {"error": "not found"})

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._reply("GET")

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._reply("POST")

            def _reply(self, method: str) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, body = service._answer(method, self.path, headers)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 429:
                    self.send_header("Retry-After", "1")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                del format, args  # quiet

        return Handler
