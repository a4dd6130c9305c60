"""The internal protocol between nodes: one request carries every sub-query a GraphQL request
needs from one node; the reply carries one answer per sub-query.

Both are compact JSON arrays (orjson). A body that does not decode into the types of
gateway/model/queries.py is a ProtocolError: the receiver answers 400, the caller fails over.
"""

from __future__ import annotations

from typing import Any

import orjson

from contracts.errors import Failure
from gateway.model.queries import Answer, Get, Prefix, Query, Range, SubQuery, Windows, WindowsOfKey


class ProtocolError(ValueError):
    """A body that is not the internal protocol (another version, a proxy's page, garbage)."""


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
            [a.id, a.node, a.rows, a.version, a.offsets, a.active, a.failure, a.message]
            for a in answers
        ]
    )


def decode_answers(body: bytes) -> list[Answer]:
    answers = []
    for item in (_array(i, "answer", 8) for i in _array(_loads(body), "reply")):
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
            )
        )
    return answers


def _encode_query(query: Query) -> list[Any]:
    match query:
        case Get(keys):
            return ["get", list(keys)]
        case WindowsOfKey(key, from_ms, to_ms):
            return ["window", key, from_ms, to_ms]
        case Range(low, high, limit, after):
            return ["range", low, high, limit, after]
        case Prefix(prefix, limit, after):
            return ["prefix", prefix, limit, after]
        case Windows(from_ms, to_ms, limit, after):
            return ["windows", from_ms, to_ms, limit, None if after is None else list(after)]


def _decode_query(raw: object) -> Query:
    item = _array(raw, "query")
    kind = item[0] if item else None
    if kind == "get" and len(item) == 2:
        return Get(tuple(_key(k) for k in _array(item[1], "keys")))
    if kind == "window" and len(item) == 4:
        return WindowsOfKey(_key(item[1]), _int(item[2]), _int(item[3]))
    if kind == "range" and len(item) == 5:
        return Range(_opt_key(item[1]), _opt_key(item[2]), _int(item[3]), _opt_key(item[4]))
    if kind == "prefix" and len(item) == 4:
        return Prefix(_str(item[1]), _int(item[2]), None if item[3] is None else _str(item[3]))
    if kind == "windows" and len(item) == 5:
        after = None
        if item[4] is not None:
            key, start = _array(item[4], "after", 2)
            after = (_key(key), _int(start))
        return Windows(_int(item[1]), _int(item[2]), _int(item[3]), after)
    raise ProtocolError(f"not a query: {str(raw)[:80]}")


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
