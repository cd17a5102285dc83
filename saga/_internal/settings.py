"""Settings a twelve-factor deployment gives by environment, and how they are read.

===========================  ===============================================  =====================
variable                     what                                             default
===========================  ===============================================  =====================
``SAGA_DATABASE_URL``        the database (library and ``saga``)              ``sqlite:///saga.db``
``SAGA_LEASE_TTL``           a coordinator's lease (``30s``, ``2m``, ``45``)  ``30s``
``SAGA_APP``                 ``saga --app``: modules to import, space list    none
``SAGA_WORKER_INTERVAL``     ``saga worker --interval``                       ``5s``
``SAGA_WORKER_BATCH``        ``saga worker --batch``                          ``20``
``SAGA_WORKER_CONCURRENCY``  ``saga worker --concurrency``                    ``4``
``SAGA_LOG_FORMAT``          ``saga worker --log-format`` (text or json)      none
``SAGA_LOG_FILE``            ``saga worker --log-file``                       none
``SAGA_METRICS_PORT``        ``saga worker --metrics-port``                   none
``SAGA_METRICS_HOST``        ``saga worker --metrics-host``                   ``127.0.0.1``
===========================  ===============================================  =====================

An argument given in code or on the command line wins over the environment.
"""

from __future__ import annotations

import os
import re

from saga._internal.errors import ConfigurationError

DEFAULT_LEASE_TTL = 30.0

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)?")
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w)?)+")


def parse_duration(text: str, what: str = "duration") -> float:
    """Seconds in ``90s``, ``10m``, ``1h30m``, ``30d``, ``2w`` or a plain number of seconds."""
    compact = text.strip().lower().replace(" ", "")
    if not _DURATION.fullmatch(compact):
        raise ConfigurationError(
            f"{what} {text!r} is not a duration; write it like 90s, 10m, 1h30m, 30d or 2w"
        )
    return sum(
        float(number) * _UNITS[unit or "s"] for number, unit in _DURATION_PART.findall(compact)
    )


def lease_ttl_setting(given: object) -> float:
    """The lease a coordinator takes: ``given``, else ``$SAGA_LEASE_TTL`` (as seconds, or
    a duration like ``45s``), else 30 s; ``ConfigurationError`` naming whichever is wrong."""
    from saga._internal.lease import check_lease_ttl

    if given is not None:
        return check_lease_ttl(given)
    text = os.environ.get("SAGA_LEASE_TTL", "").strip()
    if not text:
        return DEFAULT_LEASE_TTL
    return check_lease_ttl(parse_duration(text, "SAGA_LEASE_TTL"), "SAGA_LEASE_TTL")
