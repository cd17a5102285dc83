"""Who may see the pages, and proof that a POST came from one of them.

With a token, every request must carry it: ``Authorization: Bearer T``, or
the session cookie the login form sets (an HMAC of the token, never the token
itself). Comparisons are constant-time. Every form carries a CSRF token tied
to this process; a POST without the right one changes nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import ipaddress
import secrets
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.requests import Request

COOKIE = "saga_session"
CSRF_FIELD = "csrf"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is only reachable from this machine (127.0.0.1, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclasses.dataclass(frozen=True)
class Guard:
    """The token (if any) and this process's CSRF secret."""

    token: str | None
    secret: bytes = dataclasses.field(default_factory=lambda: secrets.token_bytes(32))

    @property
    def session_value(self) -> str:
        """What the session cookie holds: derived from the token, useless without it."""
        assert self.token is not None
        return hmac.new(self.token.encode(), b"saga-web-session", hashlib.sha256).hexdigest()

    def admits(self, request: Request) -> bool:
        """Whether the request carries the token (header) or the session cookie."""
        if self.token is None:
            return True
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() == "bearer" and self.token_matches(given.strip()):
            return True
        cookie = request.cookies.get(COOKIE, "")
        return hmac.compare_digest(cookie.encode(), self.session_value.encode())

    def token_matches(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def csrf(self) -> str:
        """The value every form of this process carries."""
        return hmac.new(self.secret, b"csrf", hashlib.sha256).hexdigest()

    def csrf_ok(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.csrf().encode())
