"""How an error is told to an operator: an exit code and one line saying what to do,
with no credential in it.

The admin command (:mod:`saga.cli`) prints the line and exits with the code; the web
console (:mod:`saga.web`) shows the same line on its error page. Both import it from
here, so that the console does not depend on the command-line package.
"""

from __future__ import annotations

from saga._internal import _secrets
from saga._internal.errors import (
    ConfigurationError,
    OperationRefusedError,
    SagaError,
    SagaFailed,
    StorageUnavailableError,
    UnknownSagaError,
)
from saga._internal.store import default_url

OK, FAILED, BAD_INPUT = 0, 1, 2


def explain(error: Exception) -> tuple[int, str]:
    """The exit code for an error, and the line that tells the operator what to do."""
    if isinstance(error, SagaFailed):
        known = error.__cause__ is error.compensation_error  # the message says it already
        cause = f": {error.__cause__}" if error.__cause__ and not known else ""
        return FAILED, f"{error}{cause}; see `saga history {error.saga_id}`"
    if isinstance(error, StorageUnavailableError):
        return BAD_INPUT, (
            f"cannot reach the database: {error}; check --db or $SAGA_DATABASE_URL "
            "and that the server is up"
        )
    if isinstance(error, UnknownSagaError | ConfigurationError):
        return BAD_INPUT, str(error)
    if isinstance(error, OperationRefusedError):
        return FAILED, f"refused: {error}"
    if isinstance(error, SagaError):
        return FAILED, str(error)
    return FAILED, f"unexpected {type(error).__name__}: {error} (run with --debug for details)"


def scrub(text: str, url: str | None) -> str:
    """``text`` with every credential of the URL in use (or of ``$PGPASSWORD``) blanked,
    should any message ever carry it (see ``saga._internal._secrets``)."""
    return _secrets.scrub(text, url or default_url())
