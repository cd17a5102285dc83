"""The JSON codec: canonical text, digests, and refusals that name the bad part."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math

import pydantic
import pytest

from saga import PayloadError
from saga._internal.codec import DEFAULT_PAYLOAD_LIMIT, decode, digest, encode


@dataclasses.dataclass
class Money:
    amount: int
    currency: str


@dataclasses.dataclass
class Order:
    id: str
    total: Money


class Card(pydantic.BaseModel):
    token: str
    expires: datetime.date


def test_encoding_is_canonical() -> None:
    assert encode({"b": 1, "a": [1, 2]}, "input").text == '{"a":[1,2],"b":1}'
    assert encode({"b": 1, "a": 2}, "x").digest == encode({"a": 2, "b": 1}, "x").digest


def test_digest_is_sha256_of_the_canonical_text() -> None:
    encoded = encode({"sku": "A1"}, "input")
    assert encoded.digest == hashlib.sha256(b'{"sku":"A1"}').hexdigest()
    assert digest(encoded.text) == encoded.digest


def test_non_ascii_text_is_stored_as_is() -> None:
    assert encode({"name": "Zoë"}, "input").text == '{"name":"Zoë"}'


def test_decode_returns_plain_json_values() -> None:
    assert decode(None) is None
    assert decode('{"a":[1,null]}') == {"a": [1, None]}


def test_decode_never_instantiates_a_class_named_in_the_payload() -> None:
    forged = '{"__class__": "os:system", "py/object": "subprocess.Popen"}'
    assert decode(forged) == {"__class__": "os:system", "py/object": "subprocess.Popen"}


def test_dataclasses_are_stored_as_their_fields() -> None:
    encoded = encode(Order("o-1", Money(250, "EUR")), "input")
    assert json.loads(encoded.text) == {"id": "o-1", "total": {"amount": 250, "currency": "EUR"}}


def test_pydantic_models_are_stored_in_json_mode() -> None:
    encoded = encode({"card": Card(token="tok", expires=datetime.date(2030, 1, 31))}, "input")
    assert decode(encoded.text) == {"card": {"expires": "2030-01-31", "token": "tok"}}


def test_nul_byte_in_a_value_is_refused_with_its_path() -> None:
    with pytest.raises(PayloadError, match="NUL byte") as caught:
        encode({"lines": ["ok", "bad\x00"]}, "input")
    assert caught.value.path == "input['lines'][1]"


def test_nul_byte_in_a_key_is_refused_with_its_path() -> None:
    with pytest.raises(PayloadError) as caught:
        encode({"a": {"k\x00": 1}}, "input")
    assert caught.value.path.startswith("input['a'][")


def test_nul_byte_inside_a_dataclass_names_the_field() -> None:
    with pytest.raises(PayloadError) as caught:
        encode(Money(1, "EU\x00R"), "result of step 'charge'")
    assert caught.value.path == "result of step 'charge'.currency"


def test_an_escaped_nul_written_out_as_text_is_fine() -> None:
    text = "literally \\u0000"
    assert decode(encode(text, "input").text) == text


def test_payload_over_the_limit_is_refused() -> None:
    with pytest.raises(PayloadError, match="over the payload limit of 10 bytes"):
        encode("x" * 20, "input", limit=10)


def test_payload_exactly_at_the_limit_is_accepted() -> None:
    assert len(encode("x" * 8, "input", limit=10).text) == 10  # two quotes + eight x


def test_limit_counts_utf8_bytes_not_characters() -> None:
    with pytest.raises(PayloadError):
        encode("éé", "input", limit=5)  # 6 bytes with the quotes
    assert DEFAULT_PAYLOAD_LIMIT == 1024 * 1024


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused(bad: float) -> None:
    with pytest.raises(PayloadError, match="not valid JSON") as caught:
        encode({"amounts": [1.0, bad]}, "input")
    assert caught.value.path == "input['amounts'][1]"


def test_non_serialisable_value_is_refused_with_its_path() -> None:
    with pytest.raises(PayloadError, match="a object is not JSON-serialisable") as caught:
        encode({"a": {"b": [1, object()]}}, "arguments of step 'debit'")
    assert caught.value.path == "arguments of step 'debit'['a']['b'][1]"


def test_a_set_is_refused() -> None:
    with pytest.raises(PayloadError, match="set") as caught:
        encode({"tags": {"x"}}, "input")
    assert caught.value.path == "input['tags']"


def test_a_non_string_key_is_refused_with_its_path() -> None:
    with pytest.raises(PayloadError, match="key of type tuple"):
        encode({(1, 2): "pair"}, "input")


def test_payload_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="input"):
        encode(object(), "input")
