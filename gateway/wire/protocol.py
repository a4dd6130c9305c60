"""The internal protocol between nodes: one request carries every sub-query a GraphQL request
needs from one node; the reply carries one answer per sub-query.

Both are compact JSON arrays (orjson). A body that does not decode into the types of
gateway/model/queries.py is a ProtocolError: the receiver answers 400, the caller fails over.

Every internal call says which version of the protocol it speaks (PROTOCOL_HEADER), and
every node's status which versions it reads (READS), so a node sends a peer only what it
can read: a peer whose status names none of this node's versions is down for routing
(gateway/cluster/health.py). A change that the previous release cannot read is a new
version, read beside the old one for a release (README: Upgrades and rollback).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from contracts.conditions import OPS, AllOf, AnyOf, Condition, Filter, Not
from contracts.errors import Failure
from gateway.model.filters import Sort
from gateway.model.queries import (
    Answer,
    Get,
    Prefix,
    Query,
    Range,
    Select,
    SubQuery,
    Totals,
    Versions,
    Windows,
    WindowsOfKey,
)

MAX_FILTER_DEPTH = 64  # deeper filters are refused before decoding recurses further
PROTOCOL = 1  # the version this release sends
READS = (1,)  # the versions it reads
PROTOCOL_HEADER = "stategate-protocol"
UNSTATED = 1  # a call without PROTOCOL_HEADER: from a release before it, which spoke 1


class ProtocolError(ValueError):
    """A body that is not the internal protocol (another version, a proxy's page, garbage)."""


def check_version(stated: str | None) -> None:
    """ProtocolError unless a call's PROTOCOL_HEADER names a version this node reads."""
    try:
        version = UNSTATED if stated is None else int(stated)
    except ValueError:
        raise ProtocolError(f"{PROTOCOL_HEADER} {stated!r} is not a version") from None
    if version not in READS:
        raise ProtocolError(f"version {version}; this node reads {list(READS)}")


def encode_request(subqueries: list[SubQuery]) -> bytes:
    return orjson.dumps(
        [
            [q.id, q.partition, q.store, _encode_query(q.query), q.bound, q.require_active,
             q.max_age_ms]
            for q in subqueries
        ]
    )  # fmt: skip


def decode_request(body: bytes) -> list[SubQuery]:
    items = _array(_loads(body), "request")
    return [
        SubQuery(
            id=_int(item[0]),
            partition=_int(item[1]),
            store=_str(item[2]),
            query=_decode_query(item[3]),
            bound={_str(t): _int(o) for t, o in _dict(item[4]).items()},
            require_active=item[5] is True,
            max_age_ms=None if item[6] is None else _int(item[6]),
        )
        for item in (_array(i, "sub-query", 7) for i in items)
    ]


def encode_answers(answers: list[Answer]) -> bytes:
    return orjson.dumps(
        [
            [a.id, a.node, a.rows, a.version, a.offsets, a.active, a.failure, a.message,
             a.appended_ms]
            for a in answers
        ]
    )  # fmt: skip


def decode_answers(body: bytes) -> list[Answer]:
    answers = []
    for item in (_array(i, "answer", 9) for i in _array(_loads(body), "reply")):
        rows = item[2]
        if rows is not None and not all(isinstance(r, list) for r in _array(rows, "rows")):
            raise ProtocolError("rows must be arrays")
        failure = item[6]
        if failure is not None and (
            not isinstance(failure, str) or failure not in Failure.__members__
        ):
            raise ProtocolError(f"unknown failure {failure!r}")
        answers.append(
            Answer(
                id=_int(item[0]),
                node=_str(item[1]),
                rows=rows,
                version=_int(item[3]),
                offsets={_str(t): _int(o) for t, o in _dict(item[4]).items()},
                active=item[5] is True,
                failure=None if failure is None else Failure(failure),
                message=None if item[7] is None else _str(item[7]),
                appended_ms=None if item[8] is None else _int(item[8]),
            )
        )
    return answers


def _encode_query(query: Query) -> list[Any]:
    encoded: list[Any] = QUERY_ENCODERS[type(query)](query)
    return encoded


def _write_get(q: Get) -> list[Any]:
    return ["get", list(q.keys)]


def _write_windows_of_key(q: WindowsOfKey) -> list[Any]:
    return ["window", q.key, q.from_ms, q.to_ms]


def _write_versions(q: Versions) -> list[Any]:
    return ["versions", q.key, q.from_ms, q.to_ms, q.limit, q.after]


def _write_range(q: Range) -> list[Any]:
    return ["range", q.low, q.high, q.limit, q.after]


def _write_prefix(q: Prefix) -> list[Any]:
    return ["prefix", q.prefix, q.limit, q.after]


def _write_windows(q: Windows) -> list[Any]:
    return ["windows", q.from_ms, q.to_ms, q.limit, _listed(q.after)]


def _write_select(q: Select) -> list[Any]:
    sorts = [[sort.field, sort.descending] for sort in q.order]
    return ["select", _encode_filter(q.where), sorts, q.limit, _listed(q.after), _listed(q.window)]


def _write_totals(q: Totals) -> list[Any]:
    return ["totals", _encode_filter(q.where), _listed(q.window)]


# Each query kind as an array on the wire, its name first (QUERY_DECODERS reads it back).
QUERY_ENCODERS: dict[type[Query], Callable[[Any], list[Any]]] = {
    Get: _write_get,
    WindowsOfKey: _write_windows_of_key,
    Versions: _write_versions,
    Range: _write_range,
    Prefix: _write_prefix,
    Windows: _write_windows,
    Select: _write_select,
    Totals: _write_totals,
}


def _listed(values: tuple[Any, ...] | None) -> list[Any] | None:
    return None if values is None else list(values)


def _encode_filter(where: Filter | None) -> Any:
    match where:
        case None:
            return None
        case Condition(field, op, value):
            return ["t", field, op, value]
        case AllOf(parts) | AnyOf(parts):
            kind = "and" if isinstance(where, AllOf) else "or"
            return [kind, [_encode_filter(part) for part in parts]]
        case Not(part):
            return ["not", _encode_filter(part)]


def _decode_query(raw: object) -> Query:
    item = _array(raw, "query")
    kind = item[0] if item and isinstance(item[0], str) else None
    found = QUERY_DECODERS.get(kind) if kind else None
    if found is None or len(item) != found[0]:
        raise ProtocolError(f"not a query: {str(raw)[:80]}")
    return found[1](item)


def _read_get(item: list[Any]) -> Get:
    return Get(tuple(_key(k) for k in _array(item[1], "keys")))


def _read_windows_of_key(item: list[Any]) -> WindowsOfKey:
    return WindowsOfKey(_key(item[1]), _int(item[2]), _int(item[3]))


def _read_versions(item: list[Any]) -> Versions:
    since = None if item[5] is None else _int(item[5])
    first = None if item[2] is None else _int(item[2])
    return Versions(_key(item[1]), first, _int(item[3]), _int(item[4]), since)


def _read_range(item: list[Any]) -> Range:
    return Range(_opt_key(item[1]), _opt_key(item[2]), _int(item[3]), _opt_key(item[4]))


def _read_prefix(item: list[Any]) -> Prefix:
    return Prefix(_str(item[1]), _int(item[2]), None if item[3] is None else _str(item[3]))


def _read_windows(item: list[Any]) -> Windows:
    after = None
    if item[4] is not None:
        key, start = _array(item[4], "after", 2)
        after = (_key(key), _int(start))
    return Windows(_int(item[1]), _int(item[2]), _int(item[3]), after)


def _read_select(item: list[Any]) -> Select:
    order = tuple(Sort(_str(f), d is True) for f, d in (_array(s, "sort", 2) for s in
                  _array(item[2], "order")))  # fmt: skip
    last = None if item[4] is None else tuple(map(_value, _array(item[4], "after")))
    where, window = _decode_filter(item[1], 0), _decode_window(item[5])
    return Select(where, order, _int(item[3]), last, window)


def _read_totals(item: list[Any]) -> Totals:
    return Totals(_decode_filter(item[1], 0), _decode_window(item[2]))


# Each query kind's name on the wire (_encode_query's), the length of its array, its decoder.
QUERY_DECODERS: dict[str, tuple[int, Callable[[list[Any]], Query]]] = {
    "get": (2, _read_get),
    "window": (4, _read_windows_of_key),
    "versions": (6, _read_versions),
    "range": (5, _read_range),
    "prefix": (4, _read_prefix),
    "windows": (5, _read_windows),
    "select": (6, _read_select),
    "totals": (3, _read_totals),
}


def _decode_window(raw: object) -> tuple[int, int] | None:
    if raw is None:
        return None
    start, end = _array(raw, "window", 2)
    return _int(start), _int(end)


def _decode_filter(raw: object, depth: int) -> Filter | None:
    if raw is None:
        return None
    if depth == MAX_FILTER_DEPTH:
        raise ProtocolError(f"a filter nests deeper than {MAX_FILTER_DEPTH}")
    item = _array(raw, "filter")
    kind = item[0] if item else None
    if kind == "t" and len(item) == 4 and item[2] in OPS:
        if item[2] == "in":
            return Condition(_str(item[1]), "in", tuple(map(_value, _array(item[3], "in"))))
        return Condition(_str(item[1]), item[2], _value(item[3]))
    if kind in ("and", "or") and len(item) == 2:
        parts = tuple(_part(part, depth) for part in _array(item[1], "filters"))
        return AllOf(parts) if kind == "and" else AnyOf(parts)
    if kind == "not" and len(item) == 2:
        return Not(_part(item[1], depth))
    raise ProtocolError(f"not a filter: {str(raw)[:80]}")


def _part(raw: object, depth: int) -> Filter:
    part = _decode_filter(raw, depth + 1)
    if part is None:
        raise ProtocolError("a filter's part must not be null")
    return part


def _value(value: object) -> object:
    """A field's value: a string, a number, a boolean or null."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise ProtocolError(f"not a field value: {str(value)[:80]}")


def _loads(body: bytes) -> object:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"not JSON: {exc}") from exc


def _array(value: object, what: str, length: int | None = None) -> list[Any]:
    if not isinstance(value, list) or (length is not None and len(value) != length):
        raise ProtocolError(f"a {what} must be an array" + (f" of {length}" if length else ""))
    return value


def _dict(value: object) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise ProtocolError("expected an object")
    return value


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError(f"expected an integer, not {value!r}")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise ProtocolError(f"expected a string, not {value!r}")
    return value


def _key(value: object) -> str | int:
    if isinstance(value, str):
        return value
    return _int(value)


def _opt_key(value: object) -> str | int | None:
    return None if value is None else _key(value)
