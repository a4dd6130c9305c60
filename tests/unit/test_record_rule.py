"""One rule, two implementations: the producer's check (contracts/records.py, in Python) and
the pipeline's (spark_pipeline/checks.py, SQL derived from the same RULES) give every value of
one corpus the same verdict: the same typed value, or the same reason."""

from __future__ import annotations

import json
import re
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from contracts import records
from contracts.project import FIELD_TYPES, KEY_TYPES, FieldType, Topic
from spark_pipeline.checks import REASON, checked_sql, field_column

# JSON texts of single values: every kind, at and past every bound.
VALUES = [
    "null", "true", "false", '""', '"x"', '"cheap"', '"42"', '"-42"', '"-0"', '"007"', '"+1"',
    '"1.5"', '"9223372036854775807"', '"9223372036854775808"', '"-9223372036854775808"',
    '"-9223372036854775809"', '"99999999999999999999999"', '"\\u00e9"', '" 1"',
    "0", "-0", "1", "-1", "7", "2147483647", "2147483648", "-2147483648", "-2147483649",
    "9007199254740992", "9007199254740993", "-9007199254740992", "-9007199254740993",
    "9223372036854775807", "9223372036854775808", "-9223372036854775808",
    "-9223372036854775809", "18446744073709551615", "18446744073709551616",
    "100000000000000000000000000000", "-100000000000000000000000000000",
    "1000000000000000000000000000000000000000000000000",
    "0.0", "-0.0", "1.5", "2.0", "1e2", "1E2", "-1.5e-3", "0.1", "1e308", "1.7976931348623157e308",
    "5e-324", "1e999", "-1e999", "NaN", "Infinity", "-Infinity",
    "[]", "[1]", "{}", '{"a": 1}',
]  # fmt: skip
KEYS = [
    "0", "-1", "7", "2147483647", "2147483648", "-2147483648", "-2147483649",
    "9223372036854775807", "9223372036854775808", "-9223372036854775809", "-0", "007", "x", "",
]  # fmt: skip


def python_verdict(kind: FieldType, text: str) -> tuple[Any, str | None]:
    topic = Topic("t", "string", {"f": kind})
    try:
        typed = records.fit_value(topic, {"f": json.loads(text)}, finite=False)
    except records.BadRecord as exc:
        return None, exc.reason
    assert typed is not None
    return typed.get("f"), None


def sql_verdicts(topic: Topic, keys: list[str], values: list[str]) -> list[tuple[Any, ...]]:
    source = pa.table(
        {
            "offset": pa.array(range(len(values)), pa.int64()),
            "timestamp": pa.array([0] * len(values), pa.int64()),
            "key": pa.array(keys, pa.string()),
            "value": pa.array(values, pa.string()),
        }
    )
    con = duckdb.connect()
    con.register("source", source)
    columns = ", ".join(field_column(n) for n in topic.value)
    selected = f"key, {columns + ', ' if columns else ''}{REASON}"
    query = f'SELECT {selected} FROM ({checked_sql(topic, "source")}) ORDER BY "offset"'
    return con.execute(query).fetchall()


@pytest.mark.parametrize("kind", FIELD_TYPES)
def test_every_value_gets_the_same_verdict_from_the_producer_and_the_pipeline(
    kind: FieldType,
) -> None:
    topic = Topic("t", "string", {"f": kind})
    rows = sql_verdicts(topic, ["k"] * len(VALUES), [f'{{"f": {v}}}' for v in VALUES])
    for text, (_, typed, reason) in zip(VALUES, rows, strict=True):
        expected = python_verdict(kind, text)
        got = (None if reason else typed, reason)
        assert got == expected, (kind, text, got, expected)


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_every_key_gets_the_same_verdict(key_type: str) -> None:
    topic = Topic("t", key_type, {})  # type: ignore[arg-type]
    rows = sql_verdicts(topic, KEYS, ["{}"] * len(KEYS))
    for text, (key, reason) in zip(KEYS, rows, strict=True):
        # an integer key column holds canonical decimals; anything else is text
        canonical = re.fullmatch(records.DECIMAL, text) and key_type != "string"
        as_json: object = int(text) if canonical else text
        try:
            expected = (records.fit_key(key_type, as_json), None)  # type: ignore[arg-type]
        except records.BadRecord as exc:
            expected = (None, exc.reason)
        got = (None if reason else key, reason)
        assert got == expected, (key_type, text, got, expected)


WIDE = Topic("t", "long", {"a": "int", "b": "string", "c": "double", "d": "long", "e": "boolean"})
WHOLE = [
    None, "not json", '{"a": 1} trailing', "", "[1]", '"s"', "1", "null", "{}", '{"a": 1}',
    '{"x": 1}', '{"a": 1, "a": 2}', '{"a": 1, "a": 1}', '{"a": 1.5, "x": 1}', '{"b": 1, "a": 1.5}',
    '{"a": null, "b": null, "c": null, "d": null, "e": null}', '{"c": NaN}', '{"c": -Infinity}',
    '{"c": "NaN"}', '{"a": 1, "b": "x", "c": 2, "d": "-5", "e": true}', '{"d": "0", "c": 0.5}',
    '{"e": 0}', '{"b": "\\u00e9\\n\\"q\\""}', '{"a": {"b": 1}}', '{"a": [1]}', ' {"a": 1} ',
    '{"A": 1}', '{"a ": 1}', '{"": 1}', '{"a": 2147483648, "b": 3}',
]  # fmt: skip
# DuckDB's JSON reader is laxer than JSON in a few ways a foreign producer could hit: it takes
# a trailing comma, and nan and inf in lower case. These read as DuckDB reads them.
LAX = {'{"a": 1,}': (1, None), '{"c": nan}': (None, None), '{"c": inf}': (None, None)}


def test_every_whole_value_gets_the_same_verdict() -> None:
    rows = sql_verdicts(WIDE, ["1"] * len(WHOLE), WHOLE)
    for text, (key, *typed, reason) in zip(WHOLE, rows, strict=True):
        try:
            record = records.read(WIDE, 1, text, 0)
            value = record.value or {}
            expected = (1, *(value.get(n) for n in WIDE.value), None)
        except records.BadRecord as exc:
            expected = (None, None, None, None, None, None, exc.reason)
        got = (key, *typed, reason) if reason is None else (None,) * 6 + (reason,)
        assert got == expected, (text, got, expected)


def test_the_pipeline_reads_what_only_duckdb_takes_as_documented() -> None:
    rows = sql_verdicts(WIDE, ["1"] * len(LAX), list(LAX))
    for text, (_, a, _b, c, _d, _e, reason) in zip(LAX, rows, strict=True):
        assert reason is None and (a, c) == LAX[text], text
        with pytest.raises(records.BadRecord):
            records.read(WIDE, 1, text, 0)


@pytest.mark.parametrize(
    "stamp", [-1, 0, 1, records.MAX_TIMESTAMP_MS, records.MAX_TIMESTAMP_MS + 1]
)
def test_timestamps_get_the_same_verdict(stamp: int) -> None:
    source = pa.table(
        {
            "offset": pa.array([0], pa.int64()),
            "timestamp": pa.array([stamp], pa.int64()),
            "key": pa.array(["1"], pa.string()),
            "value": pa.array([None], pa.string()),
        }
    )
    con = duckdb.connect()
    con.register("source", source)
    (reason,) = con.execute(f"SELECT {REASON} FROM ({checked_sql(WIDE, 'source')})").fetchone()
    try:
        records.read(WIDE, 1, None, stamp)
        expected = None
    except records.BadRecord as exc:
        expected = exc.reason
    assert reason == expected
