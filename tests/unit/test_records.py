"""The producer's check (contracts/records.py), fuzzed against every declared type: nothing the
declaration does not allow is accepted, what is allowed comes back typed exactly, and nothing
but BadRecord is ever raised."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import records
from contracts.project import FIELD_TYPES, KEY_TYPES, FieldType, Topic
from contracts.records import BadRecord, Record

INT32, INT64 = 2**31, 2**63
EDGES = [0, 1, -1, INT32 - 1, INT32, -INT32, -INT32 - 1, 2**53, 2**53 + 1, -(2**53) - 1,
         INT64 - 1, INT64, -INT64, -INT64 - 1, 2**64, 10**30]  # fmt: skip
integers = st.integers() | st.sampled_from(EDGES) | st.integers(-(2**70), 2**70)
texts = st.text(max_size=8) | st.sampled_from(["\ud800", "a\udc00", "é", "", "007", "-0", "+1"])
scalars = (
    st.none()
    | st.booleans()
    | integers
    | integers.map(str)
    | st.floats()
    | st.sampled_from([1.5, 2.0, -0.0, 1e300, 2.0**53, 2.0**63, math.inf, -math.inf, math.nan])
    | texts
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=2) | st.dictionaries(
    st.text(max_size=3), inner, max_size=2), max_leaves=4)  # fmt: skip


def allowed(kind: str, value: Any) -> tuple[bool, Any]:
    """The declaration read plainly: whether `value` is a `kind`, and as what."""
    if value is None:
        return True, None
    if isinstance(value, bool):
        return kind == "boolean", value
    if kind == "string":
        return isinstance(value, str) and not re.search("[\ud800-\udfff]", value), value
    if kind == "int":
        return isinstance(value, int) and -INT32 <= value < INT32, value
    if kind == "long":
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value) and str(int(value)) == value:
            value = int(value)
        return isinstance(value, int) and -INT64 <= value < INT64, value
    if kind == "double":
        if isinstance(value, int):
            return abs(value) <= 2**53, float(value)
        return isinstance(value, float) and math.isfinite(value), value
    return False, value


@pytest.mark.parametrize("kind", FIELD_TYPES)
@settings(max_examples=400, deadline=None)
@given(value=values)
def test_a_field_is_accepted_exactly_when_its_type_allows_it(kind: FieldType, value: Any) -> None:
    topic = Topic("t", "string", {"f": kind})
    ok, typed = allowed(kind, value)
    try:
        record = records.fit(topic, Record("k", {"f": value}, 0))
    except BadRecord as exc:
        assert not ok, (value, str(exc))
        assert str(exc).startswith(("value.f: expected", "value.f is")), str(exc)
        return
    assert ok, value
    assert record.value is not None and record.value["f"] == typed
    assert type(record.value["f"]) is type(typed)


@pytest.mark.parametrize("key_type", KEY_TYPES)
@settings(max_examples=300, deadline=None)
@given(key=scalars)
def test_a_key_is_accepted_exactly_when_its_type_allows_it(key_type: str, key: Any) -> None:
    topic = Topic("t", key_type, {})  # type: ignore[arg-type]
    ok, typed = allowed(key_type, key)
    try:
        record = records.fit(topic, Record(key, None, 0))
    except BadRecord as exc:
        assert not ok or key is None, (key, str(exc))
        return
    assert ok and key is not None, key
    assert record.key == typed and type(record.key) is type(typed)


@settings(max_examples=300, deadline=None)
@given(value=values, extra=st.text(min_size=1, max_size=3))
def test_unknown_fields_and_values_that_are_not_objects_are_refused(value: Any, extra: str) -> None:
    topic = Topic("t", "string", {"f": "string"})
    if extra != "f":
        with pytest.raises(BadRecord, match="not a field of topic 't'"):
            records.fit(topic, Record("k", {extra: value}, 0))
    if not isinstance(value, dict) and value is not None:
        with pytest.raises(BadRecord, match="expected a JSON object"):
            records.fit(topic, Record("k", value, 0))  # type: ignore[arg-type]


LINES = st.one_of(
    st.text(max_size=40),
    st.dictionaries(st.sampled_from(["key", "value", "timestamp", "x"]), values).map(json.dumps),
    st.builds(
        lambda k, v, t: json.dumps({"key": k, "value": v, "timestamp": t}), scalars, values, scalars
    ),
)


@settings(max_examples=500, deadline=None)
@given(line=LINES, key_type=st.sampled_from(KEY_TYPES))
def test_a_line_is_a_record_that_fits_or_one_bad_record_error(line: str, key_type: str) -> None:
    topic = Topic("t", key_type, {f"f{kind}": kind for kind in FIELD_TYPES})  # type: ignore[arg-type]
    try:
        record = records.parse_line(topic, line, 5)
    except BadRecord as exc:
        assert "\n" not in str(exc)
        return
    assert allowed(key_type, record.key)[0] and record.key is not None
    assert record.value is None or all(
        allowed(topic.value[name], item) == (True, item) for name, item in record.value.items()
    )
    assert 0 <= record.timestamp_ms <= records.MAX_TIMESTAMP_MS


def test_the_messages_name_the_field_the_type_and_the_value() -> None:
    topic = Topic("bookings", "long", {"trip": "string", "price": "double", "seats": "int"})
    double, int_, long = (records.RULES[t].expected for t in ("double", "int", "long"))
    cases = {
        '{"key": 1, "value": {"price": "cheap"}}': f'value.price: expected {double}, got "cheap"',
        '{"key": 1, "value": {"seats": 1.5}}': f"value.seats: expected {int_}, got 1.5",
        '{"key": 1, "value": {"seats": true}}': f"value.seats: expected {int_}, got true",
        '{"key": 1, "value": {"unknownField": 1}}': "value.unknownField: not a field of topic "
        "'bookings' (its fields: trip, price, seats; each may be missing or null)",
        '{"key": 9223372036854775808, "value": null}': f"key: expected {long}, "
        "got 9223372036854775808",
        '{"value": null}': "missing field 'key'",
        '{"key": 1}': "missing field 'value' (null for a tombstone)",
        '{"key": 1, "value": {"seats": 1, "seats": 2}}': "field 'seats' is given twice",
        '{"key": 1, "value": {"trip": ' + "[" * 5000 + "]" * 5000 + "}}": "not JSON this "
        "reader takes: nested too deeply",
    }
    for line, message in cases.items():
        with pytest.raises(BadRecord) as caught:
            records.parse_line(topic, line, 0)
        assert str(caught.value) == message
    assert records.parse_line(topic, '{"key": "-42", "value": {}}', 0).key == -42
    assert records.parse_line(topic, '{"key": 1, "value": {"price": 3}}', 0).value == {"price": 3.0}
