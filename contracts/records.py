"""What a record of a topic may hold: the one rule the producer checks before appending and
the pipeline applies to every record it reads (spark_pipeline/checks.py derives its SQL
from RULES).

A record is a key, a value (a JSON object, or null: a tombstone) and a timestamp. Its key and
each value field must be exactly a value of the declared type; nothing is ever converted:
- `string`: a JSON string; `boolean`: true or false;
- `int`: a JSON integer in -2^31..2^31-1; `long`: a JSON integer or a canonical decimal string
  (how the GraphQL API writes a Long: "-42", no sign on zero, no leading zeros) in -2^63..2^63-1;
- `double`: a finite JSON number, or a JSON integer within ±2^53 (each exactly a double).
A JSON number with a fraction or an exponent (1.5, 2.0, 1e2) is not an integer; a boolean is
not a number. Every declared value field is optional: missing or null reads as null. A field
the topic does not declare, or one given twice, refuses the record.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, cast

from contracts.partitioner import Key, KeyType
from contracts.project import FieldType, Topic
from contracts.unicode import invalid_text

MAX_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, GraphQL DateTime's last
EXACT_DOUBLE = 2**53  # every integer of this magnitude or less is exactly a double
DECIMAL = "0|-?[1-9][0-9]*"  # a canonical decimal string: str() of an integer
INTEGER_TEXT = "-?[0-9]+"  # how a JSON integer is written
_DECIMAL = re.compile(DECIMAL)
LINE_FIELDS = ("key", "value", "timestamp")  # what a producer's JSON line holds

# What a JSON value is, as far as the rules care.
Kind = Literal["string", "decimal", "boolean", "integer", "number", "null", "array", "object"]
# Why a record is refused; the pipeline counts bad records by these.
Reason = Literal[
    "missing_key",
    "missing_value",
    "bad_timestamp",
    "not_json",
    "not_an_object",
    "unknown_field",
    "duplicate_field",
    "wrong_type",
    "not_an_integer",
    "out_of_range",
    "not_finite",
    "not_unicode",
]


@dataclass(frozen=True)
class Rule:
    """The JSON values a declared type takes: their kinds and, for integers and decimal
    strings, the range they must lie in."""

    kinds: frozenset[Kind]
    low: int = 0
    high: int = 0
    expected: str = ""  # the type as an error message states it

    def in_range(self, number: int) -> bool:
        return self.low <= number <= self.high


RULES: dict[FieldType, Rule] = {
    "string": Rule(frozenset({"string"}), expected="string (a JSON string)"),
    "boolean": Rule(frozenset({"boolean"}), expected="boolean (true or false)"),
    "int": Rule(
        frozenset({"integer"}),
        -(2**31),
        2**31 - 1,
        "int (a JSON integer in -2147483648..2147483647)",
    ),
    "long": Rule(
        frozenset({"integer", "decimal"}),
        -(2**63),
        2**63 - 1,
        "long (a JSON integer or decimal string in -9223372036854775808..9223372036854775807)",
    ),
    "double": Rule(
        frozenset({"number", "integer"}),
        -EXACT_DOUBLE,
        EXACT_DOUBLE,
        "double (a finite JSON number; an integer within ±9007199254740992)",
    ),
}


class BadRecord(ValueError):
    """A record the topic's declaration does not allow; the message names the field, the
    expected type and the value."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Record:
    key: Key
    value: dict[str, object] | None
    timestamp_ms: int


def fit(topic: Topic, record: Record) -> Record:
    """The record as the log holds it (a long given as a decimal string becomes an integer),
    or BadRecord: its key, its value against the declaration (`fit_value`), then what no log
    may hold (`check`)."""
    key = fit_key(topic.key_type, record.key)
    fitted = Record(key, fit_value(topic, record.value), record.timestamp_ms)
    check(fitted)
    return fitted


def parse_line(topic: Topic, line: str, default_ms: int) -> Record:
    """A JSON line `{"key": ..., "value": {...} or null, "timestamp": ms}` (timestamp optional:
    `default_ms`) as the record the log holds, or BadRecord."""
    item = _decoded(line)
    if not isinstance(item, dict):
        raise BadRecord("not_an_object", "expected a JSON object with key, value and timestamp")
    for name in item:
        if name not in LINE_FIELDS:
            raise BadRecord(
                "unknown_field", f"unknown field {name!r} (a line has key, value and timestamp)"
            )
    if "value" not in item:
        raise BadRecord("missing_value", "missing field 'value' (null for a tombstone)")
    stamp = item.get("timestamp")
    key = fit_key(topic.key_type, item.get("key"))
    record = Record(key, item["value"], default_ms if stamp is None else stamp)
    return fit(topic, record)


def read(topic: Topic, key: object, value: str | None, timestamp_ms: object) -> Record:
    """A record as the log holds it (the value as JSON text, a key as its column holds it) by
    the same rule, in the order the pipeline checks (spark_pipeline/checks.py): key,
    timestamp, value; except that a double that is not finite reads as null. BadRecord when
    it does not fit."""
    typed_key = fit_key(topic.key_type, key)
    if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int):
        raise BadRecord("bad_timestamp", f"timestamp must be an integer, not {timestamp_ms!r}")
    check(Record(typed_key, None, timestamp_ms))
    if value is None:
        return Record(typed_key, None, timestamp_ms)
    decoded = _decoded(value)
    if not isinstance(decoded, dict):  # a tombstone is a null value, not the text "null"
        raise BadRecord("not_an_object", f"value: expected a JSON object, got {_shown(decoded)}")
    return Record(typed_key, fit_value(topic, decoded, finite=False), timestamp_ms)


def fit_key(key_type: KeyType, key: object) -> Key:
    if key is None:
        raise BadRecord("missing_key", "missing field 'key'")
    return cast(Key, _typed("key", RULES[key_type], key))


def fit_value(topic: Topic, value: object, finite: bool = True) -> dict[str, object] | None:
    """The value with each declared field typed (a missing field is left out), or BadRecord.
    `finite=False` reads a double that is not finite as null, as the pipeline reads another
    producer's log (README: Values the log may hold); a producer refuses it."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise BadRecord(
            "not_an_object", f"value: expected a JSON object or null, got {_shown(value)}"
        )
    for name in value:
        if not isinstance(name, str) or name not in topic.value:
            raise BadRecord("unknown_field", _unknown(topic, name))
    typed: dict[str, object] = {}
    for name, declared in topic.value.items():  # in declaration order, as the pipeline checks
        if name in value:
            item = value[name]
            if not finite and declared == "double" and _nonfinite(item):
                item = None
            typed[name] = _typed(f"value.{name}", RULES[declared], item)
    return typed


def check(record: Record) -> None:
    """Refuse what no log may hold (BadRecord): a timestamp outside 0..MAX_TIMESTAMP_MS, a
    number that is not finite, a string that is not valid Unicode."""
    stamp = record.timestamp_ms
    if isinstance(stamp, bool) or not isinstance(stamp, int):
        raise BadRecord(
            "bad_timestamp", f"timestamp must be an integer of milliseconds, not {stamp!r}"
        )
    if not 0 <= stamp <= MAX_TIMESTAMP_MS:
        raise BadRecord(
            "bad_timestamp",
            f"timestamp {stamp} is outside 0..{MAX_TIMESTAMP_MS} (1970 to the end of 9999)",
        )
    if isinstance(record.key, str):
        _check_text(record.key, "key")
    if record.value is not None:
        _check_json(record.value, "value")


def kind_of(value: object) -> Kind | None:
    """The JSON kind of a decoded value; None for what JSON cannot hold."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "decimal" if _DECIMAL.fullmatch(value) else "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return None


def judge(rule: Rule, kind: Kind | None, number: int | None) -> Reason | None:
    """Why a value of `kind` (and, for integers and decimal strings, of value `number`) does
    not fit `rule`; None when it does. A decimal string is a string where the rule takes no
    decimal strings."""
    if kind == "decimal" and "decimal" not in rule.kinds:
        kind = "string"
    if kind is None or kind not in rule.kinds:
        if kind == "number" and "integer" in rule.kinds:
            return "not_an_integer"
        return "wrong_type"
    if kind in ("integer", "decimal") and not rule.in_range(number or 0):
        return "out_of_range"
    return None


def _typed(where: str, rule: Rule, value: object) -> object:
    """`value` as `rule`'s type; None for null."""
    kind = kind_of(value)
    if kind == "null":
        return None
    number = int(cast(str, value)) if kind in ("integer", "decimal") else None
    reason = judge(rule, kind, number)
    if reason is None and _nonfinite(value):
        reason = "not_finite"
    if reason is not None:
        raise BadRecord(reason, f"{where}: expected {rule.expected}, got {_shown(value)}")
    if kind in ("integer", "decimal") and "decimal" in rule.kinds:
        return number  # a long given either way
    if kind == "integer" and "number" in rule.kinds:
        return float(cast(int, value))
    return value


def _decoded(text: str) -> object:
    """JSON text decoded (NaN and Infinity included, as Python's json reads them), or
    BadRecord: not JSON, nested past what Python's reader takes (about a thousand levels),
    or an object naming a field twice."""
    try:
        return json.loads(text, object_pairs_hook=_unique_fields)
    except _Twice as exc:
        raise BadRecord("duplicate_field", f"field {exc.args[0]!r} is given twice") from None
    except ValueError as exc:
        raise BadRecord("not_json", f"not JSON: {exc}") from None
    except RecursionError:  # Python's reader recurses once a level
        raise BadRecord("not_json", "not JSON this reader takes: nested too deeply") from None


class _Twice(Exception):
    """A JSON object names a field twice."""


def _unique_fields(pairs: list[tuple[str, object]]) -> dict[str, object]:
    found: dict[str, object] = {}
    for name, item in pairs:
        if name in found:
            raise _Twice(name)
        found[name] = item
    return found


def _nonfinite(value: object) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _unknown(topic: Topic, name: object) -> str:
    fields = ", ".join(topic.value) or "none"
    return (
        f"value.{_field_name(name)}: not a field of topic {topic.name!r} (its fields: {fields}; "
        "each may be "
        "missing or null)"
    )


def _shown(value: object) -> str:
    """A value as JSON writes it, cut short."""
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
    elif isinstance(value, Mapping):
        text = "an object"
    elif isinstance(value, list | tuple):
        text = "an array"
    elif isinstance(value, int | float):
        text = repr(value)
    else:
        text = f"a {type(value).__name__}"
    return text if len(text) <= 60 else text[:57] + "..."


def _check_json(value: object, where: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise BadRecord("not_finite", f"{where} is {value}: only finite numbers can be produced")
    if isinstance(value, str):
        _check_text(value, where)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_json(item, f"{where}[{i}]")
    elif isinstance(value, dict):
        for name, item in value.items():
            _check_text(name, f"a field name in {where}")
            _check_json(item, f"{where}.{name}")


def _check_text(text: object, what: str) -> None:
    problem = invalid_text(text, what) if isinstance(text, str) else None
    if problem is not None:
        raise BadRecord("not_unicode", problem)


def _field_name(name: object) -> str:
    """A field name as a message shows it: as written, or JSON-quoted when it holds control
    characters (the message stays one line)."""
    text = str(name)
    return json.dumps(text) if any(ord(c) < 0x20 or c == "\x7f" for c in text) else text
