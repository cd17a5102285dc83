"""The JSON codec: canonical encoding, digests and payload limits.

Every value saga stores (saga input, step arguments, results, errors) goes
through :func:`encode`. Encoding is canonical (sorted keys, no spaces), so the
same value always has the same SHA-256 digest. Dataclass instances and
pydantic models are stored as their fields; decoding returns plain JSON values
and never instantiates a class named in the payload. A step's result, which is
read back as its type (``saga._internal.typed``), is encoded with :func:`encode_result`: a
model as pydantic dumps it to be read back (by field name, computed fields left
out), whatever its serialisation settings.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from saga._internal.errors import PayloadError

DEFAULT_PAYLOAD_LIMIT = 1024 * 1024
"""Largest encoded payload, in bytes (1 MiB)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Encoded:
    """A value in its stored form."""

    text: str
    digest: str


def _to_json_value(value: object) -> Any:
    """Turn a dataclass or pydantic model into plain JSON values; refuse the rest."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def _to_stored_result(value: object) -> Any:
    """Like ``_to_json_value``, a model dumped to be validated back: by field name (the
    model's own ``serialize_by_alias`` would store aliases) and without computed fields
    (which ``extra="forbid"`` refuses as input): pydantic's ``round_trip`` dump."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not dataclasses.is_dataclass(value):
        return dump(mode="json", by_alias=False, round_trip=True)
    return _to_json_value(value)


def _encoder(default: Callable[[object], Any]) -> json.JSONEncoder:
    return json.JSONEncoder(
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        default=default,
    )


_DEFAULT_ENCODER = _encoder(_to_json_value)
# Only results: the digest of a context-manager step's arguments must stay what the rows
# in flight hold, or their replay would be taken for another call.
_RESULT_ENCODER = _encoder(_to_stored_result)


def encode(
    value: object,
    path: str,
    limit: int = DEFAULT_PAYLOAD_LIMIT,
    encoder: json.JSONEncoder = _DEFAULT_ENCODER,
) -> Encoded:
    """Encode ``value`` canonically, or raise ``PayloadError`` naming the bad part."""
    if value is None and limit >= len(_NONE.text):  # what most steps return: encoded once
        return _NONE
    try:
        text = encoder.encode(value)
    except (TypeError, ValueError) as error:
        bad_path, problem = _find_problem(value, path)
        raise PayloadError(bad_path, problem) from error
    if "\\u0000" in text:
        nul_path = _find_nul(value, path)
        if nul_path is not None:
            raise PayloadError(nul_path, "contains a NUL byte, which cannot be stored; remove it")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: no database can store it
        bad = _find_nul(value, path, _unencodable) or path
        raise PayloadError(bad, "contains a lone surrogate, which is not valid Unicode") from None
    if size > limit:
        raise PayloadError(
            path,
            f"is {size} bytes encoded, over the payload limit of {limit} bytes; "
            "store large data elsewhere and pass a reference",
        )
    return Encoded(text, digest(text))


def encode_result(value: object, path: str, limit: int = DEFAULT_PAYLOAD_LIMIT) -> Encoded:
    """Encode a step's result (see the module) as ``encode`` does any other value."""
    return encode(value, path, limit, _RESULT_ENCODER)


def as_json_value(value: object) -> Any:
    """``value`` as plain JSON values, a typed result (dataclass, model) as the fields it
    is stored as: what a reader that prints JSON (``--json``, the console) shows. What
    is no JSON at all is shown as its ``str``: a read must not fail on how it prints."""
    return json.loads(_SHOWN_ENCODER.encode(value))


def _shown(value: object) -> Any:
    try:
        return _to_stored_result(value)
    except TypeError:
        return str(value)


_SHOWN_ENCODER = _encoder(_shown)


MAX_NAME_BYTES = 500
MAX_KEY_BYTES = 2000
"""Longest saga or step name, and longest idempotency key, in UTF-8 bytes. A saga's
name and key form one entry of a unique index, and a PostgreSQL index entry holds at
most 2704 bytes; the limits are the same on every backend."""


NAMELESS = "give it a name with at least one visible character"
KEYLESS = "one blank key would make every run given it the same saga; pass key=None for none"
"""What to do instead of a blank name, or of a blank idempotency key (:func:`check_name`)."""


def check_name(
    value: object, what: str, limit: int = MAX_NAME_BYTES, blank: str = NAMELESS
) -> None:
    """Refuse a name or key that no backend could store and index, or that is blank: empty
    or only whitespace, which names nothing an operator could tell apart (``PayloadError``,
    ending with ``blank``)."""
    if not isinstance(value, str):
        raise PayloadError(what, f"must be a string, not {type(value).__name__}")
    if not value.strip():
        raise PayloadError(what, f"is {'only whitespace' if value else 'empty'}; {blank}")
    if "\x00" in value:
        raise PayloadError(what, "contains a NUL byte, which cannot be stored; remove it")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise PayloadError(what, "contains a lone surrogate, which is not valid Unicode") from None
    if size > limit:
        raise PayloadError(what, f"is {size} bytes in UTF-8, over the limit of {limit} bytes")


def digest(text: str) -> str:
    """SHA-256 of a canonical JSON text, as hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_NONE = Encoded("null", digest("null"))


def decode(text: str | None) -> Any:
    """Decode a stored JSON text (``None`` stays ``None``; ``null``, what most steps
    return, is not handed to the parser)."""
    return None if text is None or text == "null" else json.loads(text)


def _children(value: object) -> list[tuple[str, object]]:
    if isinstance(value, Mapping):
        return [(f"[{k!r}]", v) for k, v in value.items()]
    if isinstance(value, list | tuple):
        return [(f"[{i}]", v) for i, v in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f".{f.name}", getattr(value, f.name)) for f in dataclasses.fields(value)]
    return []


def _find_problem(value: object, path: str) -> tuple[str, str]:
    """Walk ``value`` to the first part that cannot be encoded."""
    if isinstance(value, Mapping):
        for key in value:
            if not isinstance(key, str | int | float | bool) and key is not None:
                return f"{path}[{key!r}]", f"has a key of type {type(key).__name__}; use strings"
    for suffix, child in _children(value):
        try:
            _DEFAULT_ENCODER.encode(child)
        except (TypeError, ValueError):
            return _find_problem(child, path + suffix)
    if isinstance(value, float):
        return path, f"{value!r} is not valid JSON; use null or a string"
    kind = type(value).__name__
    return path, f"a {kind} is not JSON-serialisable; pass JSON values, a dataclass or a model"


def _has_nul(text: str) -> bool:
    return "\x00" in text


def _unencodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _find_nul(value: object, path: str, bad: Callable[[str], bool] = _has_nul) -> str | None:
    """The path of the first string (value or key) that is ``bad``: has a NUL byte, by default."""
    if isinstance(value, str):
        return path if bad(value) else None
    if isinstance(value, Mapping):
        for key in value:
            if isinstance(key, str) and bad(key):
                return f"{path}[{key!r}]"
    for suffix, child in _children(value):
        found = _find_nul(child, path + suffix, bad)
        if found is not None:
            return found
    return None
