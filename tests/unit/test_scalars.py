"""Long on the wire: sent as a decimal string, read from a decimal string or an integer, and
everything else refused with a message that says what is expected, whether the value comes
as a variable (BAD_USER_INPUT) or as a literal in the document (GRAPHQL_VALIDATION_FAILED);
the compiled completion sends it as the general path does. DateTime: sent as RFC 3339 in
UTC, read from ISO 8601, as its description and @specifiedBy say."""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from graphql import GraphQLNonNull, GraphQLScalarType, GraphQLSchema, parse, validate
from graphql.execution.values import get_variable_values
from strawberry.schema.types.base_scalars import DateTimeDefinition

from contracts.project import load
from resolvers.execution.completion import PlanCompiler
from resolvers.schema.build import build_schema
from resolvers.schema.scalars import parse_datetime, parse_long, serialize_long

PROJECT = """
cluster = { secret = "s", nodes = [{ id = "n1", address = "127.0.0.1:1", data_dir = "n1" }] }
[[topics]]
name = "accounts"
key = "long"
value = { balance = "long" }
[[stores]]
name = "balances"
kind = "table"
topic = "accounts"
[[stores]]
name = "hourly"
kind = "window"
topic = "accounts"
size = "1h"
aggregates = { n = "count" }
"""
EDGES = [0, -1, 42, 2**53, 2**53 + 1, -(2**53) - 1, 2**63 - 1, -(2**63)]
REFUSED: list[Any] = [
    True, False, 1.0, 1.5, float("nan"), 2**63, -(2**63) - 1, str(2**63), str(-(2**63) - 1),
    "9" * 5000, "", "-", "+1", " 1", "1 ", "1_000", "0x10", "1e3", "1.0", "١", "٣", "abc",
    [1], {"n": 1},
]  # fmt: skip


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory) -> GraphQLSchema:
    path: Path = tmp_path_factory.mktemp("scalars") / "stategate.toml"
    path.write_text(PROJECT)
    built: GraphQLSchema = build_schema(load(path))._schema
    return built


@pytest.mark.parametrize("number", EDGES)
def test_a_long_is_sent_as_its_decimal_string_and_read_back_exactly(number: int) -> None:
    sent = serialize_long(number)
    assert sent == str(number) and json.loads(json.dumps(sent)) == sent
    assert serialize_long(np.int64(number)) == sent  # numpy's integers too
    assert parse_long(sent) == number == parse_long(number)
    # what JavaScript would read: a string survives JSON.parse; a number above 2^53 did not
    assert int(json.loads(json.dumps(sent), parse_int=float)) == number


@pytest.mark.parametrize("value", [True, 1.5, 2.0, "7", None, 2**63, -(2**63) - 1])
def test_a_value_that_is_no_long_is_not_sent(value: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        serialize_long(value)


@pytest.mark.parametrize("value", REFUSED, ids=repr)
def test_anything_but_a_decimal_string_or_an_integer_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="Long cannot represent"):
        parse_long(value)


def test_variables_take_strings_and_integers_and_refuse_the_rest(schema: GraphQLSchema) -> None:
    document = parse("query($k: Long!, $ks: [Long!]!) { balances(key: $k) { key } "
                     "balancesBatch(keys: $ks) { entries { key } } }")  # fmt: skip
    (operation,) = document.definitions
    definitions = operation.variable_definitions  # type: ignore[attr-defined]
    given = {"k": "9007199254740993", "ks": ["-9223372036854775808", 2**63 - 1, "0"]}
    coerced = get_variable_values(schema, definitions, given)
    assert not isinstance(coerced, list)
    assert coerced.coerced == {"k": 2**53 + 1, "ks": [-(2**63), 2**63 - 1, 0]}
    for value in REFUSED:
        errors = get_variable_values(schema, definitions, {"k": value, "ks": []})
        assert isinstance(errors, list) and len(errors) == 1, value
        assert "Long cannot represent" in errors[0].message, errors[0].message


@pytest.mark.parametrize(
    ("literal", "ok"),
    [
        ("9007199254740993", True),
        ('"9007199254740993"', True),
        ('"-9223372036854775808"', True),
        ("9223372036854775808", False),
        ("9" * 5000, False),
        ("-0", True),
        ('"9223372036854775808"', False),
        ("1.0", False),
        ("true", False),
        ('"0x10"', False),
        ('" 1"', False),
        ("[1]", False),
        ("{n: 1}", False),
    ],
)
def test_literals_take_decimal_strings_and_integers(
    schema: GraphQLSchema, literal: str, ok: bool
) -> None:
    errors = validate(schema, parse(f"{{ balances(key: {literal}) {{ key }} }}"))
    if ok:
        assert errors == []
    else:
        assert len(errors) == 1 and "Long cannot represent" in errors[0].message, errors


@pytest.mark.parametrize("number", EDGES)
def test_the_compiled_completion_sends_what_the_serializer_does(
    schema: GraphQLSchema, number: int
) -> None:
    long_type = schema.type_map["Long"]
    assert isinstance(long_type, GraphQLScalarType)
    for field_type in (long_type, GraphQLNonNull(long_type)):  # nullable or not
        complete = PlanCompiler(collect=None).compile(field_type, [])  # type: ignore[arg-type]
        assert complete is not None
        assert complete(number) == serialize_long(number)
        with pytest.raises(ValueError):
            complete(2**63)


def test_the_schema_says_what_a_long_looks_like(schema: GraphQLSchema) -> None:
    description = schema.type_map["Long"].description or ""
    assert "decimal digits" in description and '"9007199254740993"' in description


# --- DateTime: RFC 3339 out, ISO 8601 in ------------------------------------------------

RFC_3339_DATE_TIME = re.compile(  # RFC 3339 section 5.6, as the server writes it (UTC)
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?\+00:00"
)


@pytest.mark.parametrize(
    ("millis", "sent"),
    [
        (0, "1970-01-01T00:00:00+00:00"),
        (1_767_272_400_000, "2026-01-01T13:00:00+00:00"),
        (1_767_272_400_250, "2026-01-01T13:00:00.250000+00:00"),
    ],
)
def test_a_datetime_is_sent_as_rfc_3339_in_utc(
    schema: GraphQLSchema, millis: int, sent: str
) -> None:
    moment = datetime.fromtimestamp(millis / 1000, tz=UTC)  # how window starts are made
    assert schema.type_map["DateTime"].serialize(moment) == sent
    assert RFC_3339_DATE_TIME.fullmatch(sent)


@pytest.mark.parametrize(
    ("text", "instant"),
    [
        ("2026-01-01T13:00:00Z", datetime(2026, 1, 1, 13, tzinfo=UTC)),
        ("2026-01-01t13:00:00z", datetime(2026, 1, 1, 13, tzinfo=UTC)),
        ("2026-01-01T14:00:00+01:00", datetime(2026, 1, 1, 13, tzinfo=UTC)),
        ("2026-01-01T13:00:00.123456789+00:00", datetime(2026, 1, 1, 13, 0, 0, 123456, UTC)),
        ("2026-01-01T13:00:00", datetime(2026, 1, 1, 13)),  # naive: the resolvers read UTC
        ("2026-01-01", datetime(2026, 1, 1)),
    ],
)
def test_a_datetime_is_read_from_iso_8601(
    schema: GraphQLSchema, text: str, instant: datetime
) -> None:
    assert schema.type_map["DateTime"].parse_value(text) == instant


def _date_times(rng: random.Random) -> list[object]:
    """RFC 3339 date-times with every part at random, right and wrong, and near misses."""
    found: list[object] = []
    for _ in range(3000):
        parts = [rng.choice([1970, 2026, 9999, 1]), rng.randint(0, 13), rng.randint(0, 32)]
        clock = [rng.randint(0, 24), rng.randint(0, 60), rng.randint(0, 60)]
        text = "{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}".format(*parts, *clock)
        text += rng.choice(["", "." + "".join(rng.choices("0123456789", k=rng.randint(1, 8)))])
        sign, hours, minutes = rng.choice("+-"), rng.randint(0, 25), rng.randint(0, 61)
        text += rng.choice(["", "Z", "z", f"{sign}{hours:02d}:{minutes:02d}", f"{sign}00:00"])
        found.append(text)
    return found + [
        "2026-01-01 13:00:00Z", "2026-01-01t13:00:00Z", "2026-01-01T13:00:00,5Z",
        "2026-01-01T13:00:00+0100", "2026-01-01T13:00:00+01", "2026-01-01", "2026-01-01T13",
        "２０２６-01-01T13:00:00Z", "2026-01-01T13:00:00Z ", "", "yesterday", 5, None, 1.5,
    ]  # fmt: skip


def test_a_datetime_is_read_as_strawberrys_parser_reads_it() -> None:
    """parse_datetime gives what Strawberry's parser (dateutil's isoparse) gives: the same
    value and the same kind of tzinfo, or the same refusal."""
    for text in _date_times(random.Random(3339)):
        try:
            want: object = DateTimeDefinition.parse_value(text)
        except Exception as refusal:  # noqa: BLE001 - compared below
            want = (type(refusal), str(refusal))
        try:
            got: object = parse_datetime(text)
        except Exception as refusal:  # noqa: BLE001
            got = (type(refusal), str(refusal))
        assert got == want, text
        if isinstance(want, datetime):
            assert isinstance(got, datetime) and repr(got) == repr(want), text


def test_the_schema_says_what_a_datetime_looks_like(schema: GraphQLSchema) -> None:
    datetime_type = schema.type_map["DateTime"]
    assert datetime_type.specified_by_url == "https://www.rfc-editor.org/rfc/rfc3339#section-5.6"
    assert '"2026-01-01T13:00:00+00:00"' in (datetime_type.description or "")
    assert schema.type_map["Long"].specified_by_url is None  # no published spec sends a string
