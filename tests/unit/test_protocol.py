"""The internal protocol: what one node encodes another decodes to equal values, and a body
that is not the protocol is a ProtocolError, never any other exception."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

import orjson
import pytest

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
from gateway.wire.protocol import (
    ProtocolError,
    decode_answers,
    decode_request,
    encode_answers,
    encode_request,
)

KINDS = (
    "get", "window", "versions", "range", "prefix", "windows", "windows_after", "select", "totals"
)  # fmt: skip
Decoder = Callable[[bytes], list[Any]]


def random_string(rng: random.Random) -> str:
    return "".join(rng.choice("ab Zé日🚆\U0010ffff\"'\\\n") for _ in range(rng.randrange(0, 8)))


def random_key(rng: random.Random) -> str | int:
    if rng.random() < 0.5:
        return random_string(rng)
    return rng.choice([0, -1, 2**31 - 1, -(2**31), rng.randrange(-(2**63), 2**63)])


def random_query(rng: random.Random, kind: str) -> Query:
    def opt_key() -> str | int | None:
        return None if rng.random() < 0.3 else random_key(rng)

    millis = rng.randrange(0, 2**45)
    if kind == "get":
        return Get(tuple(random_key(rng) for _ in range(rng.randrange(0, 6))))
    if kind == "window":
        return WindowsOfKey(random_key(rng), millis, millis + rng.randrange(0, 10**7))
    if kind == "versions":
        since = None if rng.random() < 0.3 else millis
        after = None if rng.random() < 0.5 else millis + 1
        return Versions(random_key(rng), since, millis + 5, rng.randrange(1, 1002), after)
    if kind == "range":
        return Range(opt_key(), opt_key(), rng.randrange(1, 1002), opt_key())
    if kind == "prefix":
        last = None if rng.random() < 0.4 else random_string(rng)
        return Prefix(random_string(rng), rng.randrange(1, 1002), last)
    if kind == "select":
        order = tuple(Sort(random_string(rng), rng.random() < 0.5) for _ in range(rng.randrange(3)))
        last = None if rng.random() < 0.4 else tuple(random_value(rng) for _ in order)
        return Select(random_filter(rng), order, rng.randrange(1, 1002), last)
    if kind == "totals":
        return Totals(random_filter(rng))
    start = (random_key(rng), rng.randrange(0, 2**45)) if kind == "windows_after" else None
    return Windows(millis, millis + rng.randrange(0, 10**8), rng.randrange(1, 1002), start)


def random_filter(rng: random.Random, depth: int = 0) -> Filter | None:
    roll = rng.random()
    if depth == 0 and roll < 0.2:
        return None
    if depth > 3 or roll < 0.6:
        op = rng.choice(OPS)
        if op == "in":
            return Condition(random_string(rng), op, tuple(random_value(rng) for _ in range(3)))
        return Condition(random_string(rng), op, random_value(rng))
    parts = tuple(random_filter(rng, depth + 1) or Condition("k", "eq", 1) for _ in range(2))
    if roll < 0.75:
        return AllOf(parts)
    return AnyOf(parts) if roll < 0.9 else Not(parts[0])


def random_subquery(rng: random.Random, index: int, kind: str) -> SubQuery:
    return SubQuery(
        id=index,
        partition=rng.randrange(0, 64),
        store=random_string(rng),
        query=random_query(rng, kind),
        bound={random_string(rng): rng.randrange(0, 2**62) for _ in range(rng.randrange(0, 3))},
        require_active=rng.random() < 0.5,
        max_age_ms=None if rng.random() < 0.5 else rng.randrange(0, 2**40),
    )


def random_value(rng: random.Random) -> object:
    return rng.choice(
        [None, True, False, rng.randrange(-(2**63), 2**63), rng.uniform(-1e9, 1e9), 0.1, 1e300]
        + [random_string(rng)]
    )


def random_answer(rng: random.Random, index: int) -> Answer:
    failed = rng.random() < 0.4
    rows = None
    if not failed or rng.random() < 0.2:
        rows = [
            [random_key(rng), *(random_value(rng) for _ in range(rng.randrange(0, 5)))]
            for _ in range(rng.randrange(0, 6))
        ]
    return Answer(
        id=index,
        node=rng.choice(["", "node1", "nöde-2"]),
        rows=rows,
        version=rng.randrange(0, 2**40),
        offsets={random_string(rng): rng.randrange(0, 2**62) for _ in range(rng.randrange(0, 3))},
        active=rng.random() < 0.5,
        failure=rng.choice(list(Failure)) if failed else None,
        message=(random_string(rng) if rng.random() < 0.8 else None) if failed else None,
        appended_ms=rng.choice([None, rng.randrange(0, 2**62)]),
    )


def random_request(rng: random.Random) -> list[SubQuery]:
    return [random_subquery(rng, i, rng.choice(KINDS)) for i in range(rng.randrange(0, 8))]


def random_reply(rng: random.Random) -> list[Answer]:
    return [random_answer(rng, i) for i in range(rng.randrange(0, 8))]


# --- round trips ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_every_query_kind_survives_a_round_trip(kind: str) -> None:
    rng = random.Random(f"kind-{kind}")
    for _ in range(200):
        subqueries = [random_subquery(rng, i, kind) for i in range(rng.randrange(1, 5))]
        assert decode_request(encode_request(subqueries)) == subqueries


def test_mixed_requests_survive_a_round_trip() -> None:
    rng = random.Random(11)
    for _ in range(300):
        subqueries = random_request(rng)
        assert decode_request(encode_request(subqueries)) == subqueries


def test_decoded_queries_are_hashable_like_the_ones_built_in_process() -> None:
    subqueries = [
        SubQuery(0, 1, "s", Windows(0, 9, 3, ("k", 7))),
        SubQuery(1, 1, "s", Get(("a", 2))),
    ]
    decoded = decode_request(encode_request(subqueries))
    assert [hash(q.query) for q in decoded] == [hash(q.query) for q in subqueries]


def test_answers_with_and_without_failures_survive_a_round_trip() -> None:
    rng = random.Random(12)
    seen: set[Failure | None] = set()
    for _ in range(300):
        answers = random_reply(rng)
        decoded = decode_answers(encode_answers(answers))
        assert decoded == answers
        for answer in decoded:
            assert answer.failure is None or type(answer.failure) is Failure
            seen.add(answer.failure)
    assert seen == {None, *Failure}


def test_empty_request_and_reply_are_empty_arrays() -> None:
    assert decode_request(encode_request([])) == []
    assert decode_answers(encode_answers([])) == []


# --- garbage ----------------------------------------------------------------------------

VALID_SUBQUERY = [0, 1, "s", ["get", ["a", 2]], {"t": 3}, False, None]
VALID_ANSWER = [0, "n", [["a", 1]], 1, {"t": 3}, True, None, None, 1_700_000_000_000]


def with_item(item: list[Any], index: int, value: object) -> bytes:
    changed = copy.deepcopy(item)
    changed[index] = value
    return orjson.dumps([changed])


def test_the_garbage_templates_are_themselves_valid() -> None:
    assert decode_request(orjson.dumps([VALID_SUBQUERY]))[0].query == Get(("a", 2))
    assert decode_answers(orjson.dumps([VALID_ANSWER]))[0].rows == [["a", 1]]


BAD_REQUESTS: list[bytes] = [
    b"",
    b"not json",
    b"\xff\xfe",
    b"[",
    b"null",
    b"1",
    b"1.5",
    b'"text"',
    b"true",
    b"{}",
    b"[null]",
    b"[1]",
    b"[{}]",
    b"[[]]",
    orjson.dumps([VALID_SUBQUERY[:6]]),
    orjson.dumps([[*VALID_SUBQUERY, None]]),
    with_item(VALID_SUBQUERY, 0, True),
    with_item(VALID_SUBQUERY, 0, "0"),
    with_item(VALID_SUBQUERY, 0, 1.0),
    with_item(VALID_SUBQUERY, 1, False),
    with_item(VALID_SUBQUERY, 1, None),
    with_item(VALID_SUBQUERY, 2, 7),
    with_item(VALID_SUBQUERY, 2, None),
    with_item(VALID_SUBQUERY, 4, []),
    with_item(VALID_SUBQUERY, 4, {"t": True}),
    with_item(VALID_SUBQUERY, 4, {"t": "3"}),
    with_item(VALID_SUBQUERY, 6, True),
    with_item(VALID_SUBQUERY, 6, "9"),
    with_item(VALID_SUBQUERY, 3, None),
    with_item(VALID_SUBQUERY, 3, []),
    with_item(VALID_SUBQUERY, 3, "get"),
    with_item(VALID_SUBQUERY, 3, {"get": []}),
    with_item(VALID_SUBQUERY, 3, ["nope", ["a"]]),
    with_item(VALID_SUBQUERY, 3, [["get"], ["a"]]),
    with_item(VALID_SUBQUERY, 3, ["GET", ["a"]]),
    with_item(VALID_SUBQUERY, 3, ["get"]),
    with_item(VALID_SUBQUERY, 3, ["get", ["a"], 1]),
    with_item(VALID_SUBQUERY, 3, ["get", "a"]),
    with_item(VALID_SUBQUERY, 3, ["get", [True]]),
    with_item(VALID_SUBQUERY, 3, ["get", [1.5]]),
    with_item(VALID_SUBQUERY, 3, ["get", [None]]),
    with_item(VALID_SUBQUERY, 3, ["get", [["a"]]]),
    with_item(VALID_SUBQUERY, 3, ["window", "k", 0]),
    with_item(VALID_SUBQUERY, 3, ["window", "k", True, 1]),
    with_item(VALID_SUBQUERY, 3, ["window", None, 0, 1]),
    with_item(VALID_SUBQUERY, 3, ["range", None, None, 10]),
    with_item(VALID_SUBQUERY, 3, ["range", None, None, False, None]),
    with_item(VALID_SUBQUERY, 3, ["range", True, None, 10, None]),
    with_item(VALID_SUBQUERY, 3, ["range", None, None, 10, 1.5]),
    with_item(VALID_SUBQUERY, 3, ["prefix", 1, 10, None]),
    with_item(VALID_SUBQUERY, 3, ["prefix", "a", "10", None]),
    with_item(VALID_SUBQUERY, 3, ["prefix", "a", 10, 3]),
    with_item(VALID_SUBQUERY, 3, ["windows", 0, 1, 10]),
    with_item(VALID_SUBQUERY, 3, ["windows", 0, 1, True, None]),
    with_item(VALID_SUBQUERY, 3, ["windows", 0, 1, 10, ["k"]]),
    with_item(VALID_SUBQUERY, 3, ["windows", 0, 1, 10, ["k", 1, 2]]),
    with_item(VALID_SUBQUERY, 3, ["windows", 0, 1, 10, ["k", True]]),
    with_item(VALID_SUBQUERY, 3, ["windows", 0, 1, 10, [None, 1]]),
    with_item(VALID_SUBQUERY, 3, ["windows", 0, 1, 10, "k"]),
    with_item(VALID_SUBQUERY, 3, ["windows", 0, 1, 10, {"k": 1}]),
    with_item(VALID_SUBQUERY, 3, ["windows", 0, 1.0, 10, None]),
]

BAD_REPLIES: list[bytes] = [
    b"",
    b"garbage",
    b"null",
    b"3",
    b"false",
    b'{"answers": []}',
    b"[null]",
    b"[[]]",
    b'["answer"]',
    orjson.dumps([VALID_ANSWER[:8]]),
    orjson.dumps([[*VALID_ANSWER, None]]),
    with_item(VALID_ANSWER, 0, True),
    with_item(VALID_ANSWER, 0, None),
    with_item(VALID_ANSWER, 1, None),
    with_item(VALID_ANSWER, 1, 1),
    with_item(VALID_ANSWER, 2, "rows"),
    with_item(VALID_ANSWER, 2, {"a": 1}),
    with_item(VALID_ANSWER, 2, [1, 2]),
    with_item(VALID_ANSWER, 2, [["a"], None]),
    with_item(VALID_ANSWER, 3, True),
    with_item(VALID_ANSWER, 3, None),
    with_item(VALID_ANSWER, 3, 1.5),
    with_item(VALID_ANSWER, 4, None),
    with_item(VALID_ANSWER, 4, [["t", 3]]),
    with_item(VALID_ANSWER, 4, {"t": False}),
    with_item(VALID_ANSWER, 6, "NOT_A_FAILURE"),
    with_item(VALID_ANSWER, 6, "not_present"),
    with_item(VALID_ANSWER, 6, "retryable"),
    with_item(VALID_ANSWER, 6, 1),
    with_item(VALID_ANSWER, 6, True),
    with_item(VALID_ANSWER, 7, 5),
    with_item(VALID_ANSWER, 7, ["message"]),
    with_item(VALID_ANSWER, 8, "1700000000000"),
    with_item(VALID_ANSWER, 8, 1.5),
    with_item(VALID_ANSWER, 8, True),
]

# A failure field holding an array or an object (unhashable in Python): see the report.
BAD_FAILURE_SHAPES: list[bytes] = [
    with_item(VALID_ANSWER, 6, []),
    with_item(VALID_ANSWER, 6, ["NOT_PRESENT"]),
    with_item(VALID_ANSWER, 6, {}),
    with_item(VALID_ANSWER, 6, {"NOT_PRESENT": 1}),
]


@pytest.mark.parametrize("body", BAD_REQUESTS)
def test_a_request_body_that_is_not_the_protocol_is_a_protocol_error(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_request(body)


@pytest.mark.parametrize("body", BAD_REPLIES)
def test_a_reply_body_that_is_not_the_protocol_is_a_protocol_error(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_answers(body)


def test_a_failure_that_is_an_array_or_object_is_a_protocol_error() -> None:
    escaped = []
    for body in BAD_FAILURE_SHAPES:
        try:
            decode_answers(body)
        except ProtocolError:
            continue
        except Exception as exc:  # noqa: BLE001 - the router catches ProtocolError only
            escaped.append(f"{body.decode()} raised {exc!r}")
        else:
            escaped.append(f"{body.decode()} decoded")
    assert escaped == []


GARBAGE: list[object] = [None, True, False, 0, -1, 1.5, "", "x", "get", [], [None], {}, {"a": 1}]


def mutate(rng: random.Random, value: object) -> object:
    """Replace one randomly chosen node of a JSON document with a garbage value."""
    if isinstance(value, list) and value and rng.random() < 0.8:
        items = list(value)
        index = rng.randrange(len(items))
        items[index] = mutate(rng, items[index])
        return items
    if isinstance(value, dict) and value and rng.random() < 0.8:
        members = dict(value)
        key = rng.choice(list(members))
        members[key] = mutate(rng, members[key])
        return members
    return rng.choice(GARBAGE)


@pytest.mark.parametrize(
    ("decode", "valid"),
    [
        (decode_request, lambda rng: orjson.loads(encode_request(random_request(rng)))),
        (decode_answers, lambda rng: orjson.loads(encode_answers(random_reply(rng)))),
    ],
    ids=["request", "reply"],
)
def test_a_mutated_body_decodes_or_is_a_protocol_error_and_nothing_else(
    decode: Decoder, valid: Callable[[random.Random], object]
) -> None:
    rng = random.Random(13)
    unexpected: list[tuple[bytes, str]] = []
    for _ in range(1500):
        body = orjson.dumps(mutate(rng, valid(rng)))
        try:
            decode(body)
        except ProtocolError:
            pass
        except Exception as exc:  # noqa: BLE001 - anything else escapes the failover
            unexpected.append((body, repr(exc)))
    assert unexpected[:5] == []


def test_truncated_bodies_are_protocol_errors() -> None:
    rng = random.Random(14)
    for _ in range(200):
        for encoded, decode in (
            (encode_request(random_request(rng)), decode_request),
            (encode_answers(random_reply(rng)), decode_answers),
        ):
            if len(encoded) <= 2:
                continue
            cut = rng.randrange(1, len(encoded) - 1)
            with pytest.raises(ProtocolError):
                decode(encoded[:cut])
