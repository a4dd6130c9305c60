"""The record rule of contracts/records.py in DuckDB SQL, derived from the same RULES: which of
a topic's new records are bad and why, and the typed fields of the good ones, computed in the
task that builds the partition's layer (spark_pipeline/snapshot.py).

Each value is parsed once (json_extract of every declared field, json_keys), and a field's
JSON kind is read from its JSON text as DuckDB writes it: a string starts with a quote, a
number with a fraction or an exponent is written with them (1e2 as 100.0), an integer as its
digits (past the 64-bit range too). A double that is not finite reads as null (README:
Values the log may hold). tests/unit/test_record_rule.py runs one
corpus through this and through contracts.records and expects the same verdicts.
"""

from __future__ import annotations

from typing import NamedTuple

import duckdb

from contracts.project import FieldType, Topic
from contracts.records import DECIMAL, INTEGER_TEXT, MAX_TIMESTAMP_MS, RULES, Rule
from contracts.snapshot_file import DUCK_TYPES, finite_or_null, literal, quoted

REASON = "_reason"  # NULL for a good record, else a contracts.records.Reason
TOMBSTONE = "_tombstone"


class BadRow(NamedTuple):
    """A bad record as the log holds it, and why."""

    offset: int
    timestamp: int | None
    key: str | None  # as text
    value: str | None  # JSON text
    reason: str


def bad_rows(con: duckdb.DuckDBPyConnection, checked: str) -> list[BadRow]:
    """The bad records of a table of `checked_sql`, in offset order."""
    rows = con.execute(
        f'SELECT "offset", timestamp, _text, value, {REASON} FROM {checked} '
        f'WHERE {REASON} IS NOT NULL ORDER BY "offset"'
    ).fetchall()
    return [BadRow(*row) for row in rows]


def field_column(name: str) -> str:
    """A value field's typed column; field names have no "_", so it never clashes."""
    return quoted(f"v_{name}")


def checked_sql(topic: Topic, source: str) -> str:
    """A SELECT over `source` (offset, timestamp, key as text, value as JSON text or null) of
    offset, timestamp, the key as text (_text) and as declared, value, _tombstone, each value
    field typed (null when missing) and _reason."""
    names = list(topic.value)
    paths = ", ".join(literal(_path(n)) for n in names)
    extracted = f"json_extract(value, [{paths}])" if names else "CAST(NULL AS JSON[])"
    parsed = (
        f'SELECT "offset", timestamp, key AS _text, value, value IS NULL AS {TOMBSTONE}, '
        f"CASE WHEN json_valid(value) THEN {extracted} END AS _f, "
        f"CASE WHEN json_valid(value) THEN json_keys(value) END AS _k FROM {source}"
    )
    parts = "".join(
        f", _f[{i}] AS _f{i}, CAST(_f[{i}] AS VARCHAR) AS _r{i}" for i in range(1, len(names) + 1)
    )
    kinds = "".join(
        f", {_kind(i, RULES[kind])} AS _kind{i}"
        for i, kind in enumerate(topic.value.values(), start=1)
    )
    typed = "".join(
        f", {_value(i, kind)} AS {field_column(name)}"
        for i, (name, kind) in enumerate(topic.value.items(), start=1)
    )
    key_rule = RULES[topic.key_type]
    key_kind = "'string'"  # an integer column's keys reach the task as decimal text:
    if "integer" in key_rule.kinds:
        key_kind = _matching("_text", DECIMAL, "integer", "string")
    key_reason = _judged(key_kind, key_rule, "_text")
    return (
        f'SELECT "offset", timestamp, _text, TRY_CAST(_text AS {DUCK_TYPES[topic.key_type]}) '
        f"AS key, value, {TOMBSTONE}{typed}, {_reason(topic)} AS {REASON} "
        f"FROM (SELECT *{kinds}, {key_reason} AS _keyreason FROM (SELECT *{parts} FROM ({parsed})))"
    )


def _reason(topic: Topic) -> str:
    """Why a record is bad, in the order contracts.records.read checks."""
    names = list(topic.value)
    present = " + ".join(f"list_contains(_k, {literal(n)})::INTEGER" for n in names) or "0"
    fields = [_field_reason(i, RULES[kind]) for i, kind in enumerate(topic.value.values(), 1)]
    return (
        "CASE WHEN _text IS NULL THEN 'missing_key' "
        "WHEN _keyreason IS NOT NULL THEN _keyreason "
        f"WHEN timestamp IS NULL OR timestamp NOT BETWEEN 0 AND {MAX_TIMESTAMP_MS} "
        "THEN 'bad_timestamp' "
        f"WHEN {TOMBSTONE} THEN NULL "
        "WHEN _k IS NULL THEN 'not_json' "
        "WHEN len(_k) = 0 AND json_type(value) <> 'OBJECT' THEN 'not_an_object' "
        f"WHEN len(_k) <> {present} THEN CASE WHEN len(_k) <> len(list_distinct(_k)) "
        f"THEN 'duplicate_field' ELSE 'unknown_field' END "
        f"ELSE {_coalesce(fields)} END"
    )


def _coalesce(reasons: list[str]) -> str:
    if not reasons:
        return "NULL"
    return reasons[0] if len(reasons) == 1 else f"coalesce({', '.join(reasons)})"


def _kind(i: int, rule: Rule) -> str:
    """The JSON kind (contracts.records.Kind) of field i, read from its first character as
    DuckDB writes a JSON value (cheaper than json_type); NULL when missing or null."""
    text = f"(_f{i}->>'$')"
    string = (
        _matching(text, DECIMAL, "decimal", "string") if "decimal" in rule.kinds else "'string'"
    )
    number = _matching(f"_r{i}", INTEGER_TEXT, "integer", "number")
    return (
        f"CASE WHEN _r{i} IS NULL OR _r{i} = 'null' THEN NULL ELSE CASE left(_r{i}, 1) "
        f"WHEN '\"' THEN {string} WHEN 't' THEN 'boolean' WHEN 'f' THEN 'boolean' "
        f"WHEN '[' THEN 'array' WHEN '{{' THEN 'object' ELSE {number} END END"
    )


def _matching(text: str, pattern: str, kind: str, otherwise: str) -> str:
    """`kind` when `text` matches `pattern` whole, else `otherwise`."""
    return (
        f"CASE WHEN regexp_full_match({text}, {literal(pattern)}) THEN {literal(kind)} "
        f"ELSE {literal(otherwise)} END"
    )


def _field_reason(i: int, rule: Rule) -> str:
    number = f"CASE _kind{i} WHEN 'decimal' THEN (_f{i}->>'$') ELSE _r{i} END"
    return f"CASE WHEN _kind{i} IS NOT NULL THEN {_judged(f'_kind{i}', rule, number)} END"


def _judged(kind: str, rule: Rule, number: str) -> str:
    """contracts.records.judge in SQL: NULL when a value of `kind` (a numeric text `number`)
    fits `rule`, else the reason."""
    accepted = ", ".join(literal(k) for k in sorted(rule.kinds))
    ranged = ", ".join(literal(k) for k in ("integer", "decimal") if k in rule.kinds)
    in_range = f"coalesce(TRY_CAST({number} AS HUGEINT) BETWEEN {rule.low} AND {rule.high}, false)"
    out_of_range = f"WHEN {kind} IN ({ranged}) AND NOT {in_range} THEN 'out_of_range' "
    not_integer = f"WHEN {kind} = 'number' THEN 'not_an_integer' "
    return (
        f"(CASE {out_of_range if ranged else ''}WHEN {kind} IN ({accepted}) THEN NULL "
        f"{not_integer if 'integer' in rule.kinds else ''}ELSE 'wrong_type' END)"
    )


def _value(i: int, kind: FieldType) -> str:
    """Field i as its declared type, exactly (its reason is NULL); NULL when missing."""
    text, raw = f"(_f{i}->>'$')", f"_r{i}"
    if kind == "string":
        return f"CASE WHEN _kind{i} = 'string' THEN {text} END"
    if kind == "boolean":
        return f"CASE WHEN _kind{i} = 'boolean' THEN {raw} = 'true' END"
    if kind == "double":
        number = f"TRY_CAST({raw} AS DOUBLE)"
        return (
            f"CASE _kind{i} WHEN 'integer' THEN {number} "
            f"WHEN 'number' THEN {finite_or_null(number)} END"
        )
    digits = f"CASE _kind{i} WHEN 'integer' THEN {raw} WHEN 'decimal' THEN {text} END"
    return f"TRY_CAST({digits} AS {DUCK_TYPES[kind]})"


def _path(name: str) -> str:
    return '$."' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
