"""Results that keep their type.

saga stores a step's result as JSON; a dataclass or a pydantic model is stored as
its fields. Read back, the JSON is made that type again when the step says what
it returns: ``result_type=`` where the step is declared or called, else the
function's return annotation (``-> Quote``). The stored JSON is validated on the
way: a mismatch (the type changed since the result was recorded, or one of its
validators raised) is a ``ResultTypeError`` naming the step, not a half-built
object nor the validator's own exception.

What is stored must read back as it was written: a model is stored by field name
without its computed fields (``saga._internal.codec.encode_result``: pydantic's round-trip
dump), and read accepting a field's name or its alias, so that a model with aliases,
computed fields or ``extra="forbid"`` comes back from its own record.

Only the declared type is ever built: the stored JSON names no class, so a row
written by someone with database access cannot make saga instantiate anything
else. With pydantic installed (it comes with FastAPI), any type pydantic
validates works (``list[Quote]``, ``Quote | None``, models nested in
dataclasses); without it, dataclasses (nested, in lists and dicts, optional).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from saga._internal.errors import SagaError

NOT_TYPED: Any = None
"""What ``result_type_of`` answers for a result kept as plain JSON."""


class ResultTypeError(SagaError, TypeError):
    """A stored result does not match the type its step declares (``result_type=`` or
    the return annotation), typically because the type changed since it was recorded,
    or the type raised reading it (``raised``: a validator's own exception)."""

    def __init__(
        self, what: str, result_type: object, problem: str, stored: Any = None, raised: bool = False
    ) -> None:
        self.what = what
        self.result_type = result_type
        self.problem = problem
        self.stored = stored
        """The result as stored (decoded JSON), for a reader that can do with it."""
        why = (
            "the type could not read what it stored: fix the type"
            if raised
            else "it was likely recorded by code whose type differed: make the type accept it"
        )
        super().__init__(
            f"{what} does not match its type {_name(result_type)}: {problem}; {why}, or read "
            "it as the JSON it is stored as (saga show; ctx.result_error in a compensation)"
        )


def result_type_of(fn: Callable[..., Any] | None, explicit: object = None) -> Any:
    """The type ``fn``'s result is read back as: ``explicit``, else its return
    annotation when that holds a dataclass or a model; else ``NOT_TYPED``."""
    if explicit is not None:
        return explicit
    if fn is None:
        return NOT_TYPED
    return _annotated(fn)


@functools.lru_cache(maxsize=4096)
def _annotated(fn: Callable[..., Any]) -> Any:
    while isinstance(fn, functools.partial):
        fn = fn.func
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an annotation that does not resolve here: keep the JSON
        return NOT_TYPED
    returned = hints.get("return")
    return returned if returned is not None and _holds_a_class(returned) else NOT_TYPED


def _holds_a_class(tp: object) -> bool:
    """Whether ``tp`` is, or has inside it, a dataclass or a pydantic model."""
    if _is_model(tp) or (dataclasses.is_dataclass(tp) and isinstance(tp, type)):
        return True
    return any(_holds_a_class(arg) for arg in typing.get_args(tp))


def revive(value: Any, result_type: Any, what: str) -> Any:
    """``value`` (as decoded from JSON) as ``result_type``; unchanged if not typed.

    Any failure is a ``ResultTypeError`` (its ``stored`` is ``value``): a validator or a
    ``__post_init__`` of the application's type may raise anything, and the reader (a
    view, an unwinding) must be able to tell a result it cannot type from its own error.
    """
    if result_type is NOT_TYPED:
        return value
    try:
        adapter = _pydantic_adapter(result_type)
        if adapter is not None:
            return _validated(adapter, value, result_type, what)
        return _built(result_type, value, what)
    except ResultTypeError as error:
        error.stored = value
        raise
    except Exception as error:  # noqa: BLE001 - the application's type raised: say so
        problem = f"reading it raised {type(error).__name__}: {error}"
        raise ResultTypeError(what, result_type, problem, value, raised=True) from error


@functools.lru_cache(maxsize=1024)
def _pydantic_adapter(result_type: Any) -> Any:
    try:
        from pydantic import TypeAdapter
    except ImportError:
        return None
    return TypeAdapter(result_type)


@functools.cache
def _by_name_or_alias() -> dict[str, bool]:
    """How a stored model is read: by field name (how it is stored) or by alias (how
    rows recorded by a model configured to dump by alias hold it). pydantic before 2.11
    has no such switch: there a model reads as its own configuration says."""
    from pydantic import TypeAdapter

    accepted = inspect.signature(TypeAdapter.validate_python).parameters
    return {"by_alias": True, "by_name": True} if "by_name" in accepted else {}


def _validated(adapter: Any, value: Any, result_type: Any, what: str) -> Any:
    from pydantic import ValidationError

    try:
        return adapter.validate_python(value, **_by_name_or_alias())
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())) or "the value"
        raise ResultTypeError(what, result_type, f"{where}: {first.get('msg')}") from None


def _built(tp: Any, value: Any, what: str) -> Any:
    """Without pydantic: dataclasses built field by field, through lists, dicts, optionals."""
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass(tp, value, what)
    if _is_model(tp):  # a model without pydantic importable cannot happen; be plain
        return tp.model_validate(value)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        typed = [arg for arg in args if arg is not type(None)]
        return _built(typed[0], value, what) if len(typed) == 1 else value
    if origin in (list, tuple, set, frozenset) and isinstance(value, list):
        item = args[0] if args else Any
        return origin(_built(item, v, f"{what}[{i}]") for i, v in enumerate(value))
    if origin is dict and isinstance(value, dict) and len(args) == 2:
        return {k: _built(args[1], v, f"{what}[{k!r}]") for k, v in value.items()}
    return value


def _dataclass(tp: type, value: Any, what: str) -> Any:
    if not isinstance(value, Mapping):
        raise ResultTypeError(what, tp, f"expected an object, found {type(value).__name__}")
    hints = typing.get_type_hints(tp)
    fields = [f for f in dataclasses.fields(tp) if f.init]
    unknown = set(value) - {f.name for f in fields}
    if unknown:
        raise ResultTypeError(what, tp, f"unexpected field(s) {', '.join(sorted(unknown))}")
    given = {
        f.name: _built(hints.get(f.name, Any), value[f.name], f"{what}.{f.name}")
        for f in fields
        if f.name in value
    }
    try:
        return tp(**given)
    except TypeError as error:  # a required field missing
        raise ResultTypeError(what, tp, str(error)) from None


def _is_model(tp: object) -> bool:
    return inspect.isclass(tp) and callable(getattr(tp, "model_validate", None))


def _name(tp: object) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")
