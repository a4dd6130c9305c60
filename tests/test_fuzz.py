"""Every input is answered in one shape, on a connection that stays open, by a node that lives.

One small cluster for the module; every request goes over real HTTP on one keep-alive
connection to node1. A response must have a status below 500 and a JSON body in a documented
shape: a GraphQL response (`data` and/or `errors`, each error coded from the README's Errors
table) or the error document `{"error": {"code", "message"}}`; and it must come back on the
connection the previous one did, without `Connection: close`. Violations are collected, not
raised, so a run lists every class of failure at once (and Hypothesis does not shrink).
Afterwards the node is alive, its memory did not run away, and it still answers like the
oracle.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from graphql import (
    GraphQLEnumType,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLSchema,
)
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis_graphql import Mode, from_schema, nodes

from contracts.cluster_secret import secret_headers
from contracts.project import Project
from contracts.settings import MAX_SUBQUERY_KEYS
from gateway.model.limits import SCAN_LOOKAHEAD
from gateway.model.queries import Get, Prefix, Range, SubQuery, Windows, WindowsOfKey
from gateway.wire.protocol import decode_answers, decode_request, encode_request
from resolvers.schema.build import build_schema
from spark_pipeline.spark import LazySpark
from tests import oracle
from tests.nodes import Served, serve

NODE = "node1"
README = Path(__file__).resolve().parents[1] / "README.md"
FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI is reproducible
    phases=[Phase.explicit, Phase.generate],  # failures are collected, nothing to shrink
    suppress_health_check=list(HealthCheck),
)
RSS_GROWTH_BOUND = 160 * 2**20  # what fuzzing may leave behind in node1 (bodies are 4 MB)
LIMIT_CODES = {"TOO_MANY_KEYS", "PAGE_SIZE_OUT_OF_RANGE", "WINDOW_RANGE_TOO_LARGE"}
# Small limits, so that a partition of the small project holds more than a page.
LIMITS = "max_page_size = 20\ndefault_page_size = 10\nmax_keys_per_field = 50"
QUERY = "query($k: Int!) { trainStatus(key: $k) { key } }"
SEED = orjson.dumps({"query": QUERY, "variables": {"k": 7}, "operationName": None})
HASH = hashlib.sha256(QUERY.encode()).hexdigest()
UNKNOWN = "0" * 64


def persisted(hash: object = HASH, version: object = 1) -> dict[str, Any]:
    return {"persistedQuery": {"version": version, "sha256Hash": hash}}


PERSISTED_SEED = orjson.dumps({"query": QUERY, "variables": {"k": 7}, "extensions": persisted()})


def documented_codes() -> set[str]:
    """The codes of the README's Errors table."""
    section = README.read_text().split("### Errors", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`([A-Z_]+)`", section))


@dataclass
class Wire:
    """One keep-alive connection to a node, and what went wrong on it."""

    url: str
    codes: set[str]
    project: Project
    problems: dict[str, str] = field(default_factory=dict)  # class -> one example
    _port: int | None = None
    _last: str = ""
    _sent: float = 0.0  # when the request under way was sent (time.monotonic)
    _answered: float = 0.0  # when the one before it was answered
    _before: str = ""  # what that one was

    def __post_init__(self) -> None:
        self.client = httpx.Client(
            base_url=self.url,
            timeout=60,
            # httpx drops a connection idle for 5 s itself: the node's keep_alive_s decides
            limits=httpx.Limits(max_connections=1, keepalive_expiry=None),
            event_hooks={"response": [self._arrived]},
        )

    def _arrived(self, response: httpx.Response) -> None:
        port = response.extensions["network_stream"].get_extra_info("client_addr")[1]
        idle = self._sent - self._answered  # a connection idle for keep_alive_s is closed
        reopened = self._port is not None and port != self._port
        if reopened and idle < self.project.settings.keep_alive_s:
            example = f"after {self._before} (then {self._last}, {idle:.1f} s later)"
            self.problem("connection closed silently", example)
        self._port, self._answered, self._before = port, time.monotonic(), self._last

    def problem(self, kind: str, example: str) -> None:
        self.problems.setdefault(kind, example[:600])

    def send(
        self, what: str, method: str, path: str, reply: bool = False, **kwargs: Any
    ) -> httpx.Response | None:
        """A request; its response when it came back in a documented shape (`reply`: a 200
        is an internal reply, checked by the caller)."""
        self._last, self._sent = what, time.monotonic()
        try:
            response = self.client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            self.problem(f"{type(exc).__name__}", f"{what}: {exc!r}")
            self._port = None
            return None
        if response.headers.get("connection", "").lower() == "close":
            self.problem(f"{response.status_code} closes the connection", what)
        shape = "" if reply and response.status_code == 200 else self.shape(response)
        if shape:
            self.problem(f"{response.status_code} {shape}", f"{what} -> {response.text[:300]!r}")
            return None
        return response

    def shape(self, response: httpx.Response) -> str:
        """What is wrong with a response's status and body ("" when nothing)."""
        if response.status_code >= 500:
            return f"status ({response.headers.get('content-type')})"
        try:
            body = response.json()
        except ValueError:
            return f"not JSON ({response.headers.get('content-type')})"
        if isinstance(body, dict) and set(body) == {"error"}:
            error = body["error"]
            ok = isinstance(error, dict) and set(error) == {"code", "message"}
            return "" if ok and all(isinstance(v, str) for v in error.values()) else "bad error"
        if isinstance(body, list) and body and response.status_code == 200:  # a batch's
            return next(filter(None, map(self.graphql_shape, body)), "")
        return self.graphql_shape(body)

    def graphql_shape(self, body: Any) -> str:
        """What is wrong with a GraphQL response ("" when nothing)."""
        if not isinstance(body, dict) or not {"data", "errors"} & set(body):
            return "neither a GraphQL response nor the error document"
        if not set(body) <= {"data", "errors", "extensions"}:
            return f"unknown members {sorted(set(body))}"
        for error in body.get("errors") or ():
            code = (error.get("extensions") or {}).get("code")
            if code not in self.codes:
                return f"error coded {code!r}"
        return ""

    def close(self) -> None:
        self.client.close()


def report(problems: dict[str, str]) -> str:
    return "\n".join(f"{kind}: {example}" for kind, example in sorted(problems.items()))


@pytest.fixture(scope="module")
def cluster(spark: LazySpark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = serve(tmp_path_factory.mktemp("fuzz"), spark, settings=LIMITS)
    yield served
    served.nodes.stop_all()


@pytest.fixture(scope="module")
def rss_before(cluster: Served) -> int:
    cluster.nodes.data(NODE, "{ trainDelaysRange(first: 5) { records { key } } }")
    return cluster.nodes.rss(NODE)


@pytest.fixture
def wire(cluster: Served, rss_before: int) -> Iterator[Wire]:
    connection = Wire(cluster.nodes.url(NODE), documented_codes(), cluster.project)
    yield connection
    connection.close()


@pytest.fixture(scope="module")
def schema(cluster: Served) -> GraphQLSchema:
    built: GraphQLSchema = build_schema(cluster.project)._schema
    return built


# --- generated GraphQL ------------------------------------------------------------------

WIDE_INTS = st.integers(min_value=-(2**70), max_value=2**70) | st.sampled_from(
    [0, -1, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 2**64]
)
STAMPS = st.datetimes().map(lambda d: d.isoformat()) | st.text(max_size=30)
# A Long is read from a decimal string or an integer; near misses are refused with a code.
LONGS = (
    WIDE_INTS.map(str)
    | WIDE_INTS.map(lambda n: f" {n}")
    | st.sampled_from(["+1", "1_000", "0x10", "1e3", "1.0", "", "-", "\u0661", "٣"])
    | st.text(alphabet="0123456789-+. ", max_size=25)
)
SCALARS = {
    "DateTime": STAMPS.map(nodes.String),
    "Long": WIDE_INTS.map(nodes.Int) | LONGS.map(nodes.String),
}
JSON = st.recursive(
    st.none() | st.booleans() | WIDE_INTS | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


def typed(kind: GraphQLInputType, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values of a variable of this type, mostly right, now and then any JSON at all; a
    recursive input type (a filter's `and`, `or`, `not`) nests at most three deep."""
    nullable = not isinstance(kind, GraphQLNonNull)
    inner = kind.of_type if isinstance(kind, GraphQLNonNull) else kind
    if isinstance(inner, GraphQLList):
        right = st.lists(typed(inner.of_type, depth), max_size=5)
    elif isinstance(inner, GraphQLInputObjectType) and depth >= 3:
        right = st.just({})
    elif isinstance(inner, GraphQLInputObjectType):
        right = st.fixed_dictionaries(
            {}, optional={k: typed(f.type, depth + 1) for k, f in inner.fields.items()}
        )
    elif isinstance(inner, GraphQLEnumType):
        right = st.sampled_from(list(inner.values))
    else:
        right = {
            "Int": WIDE_INTS,
            "Long": WIDE_INTS | LONGS,
            "Float": st.floats(),
            "Boolean": st.booleans(),
            "DateTime": STAMPS,
        }.get(inner.name, st.text(max_size=40))
    return st.one_of(right, *([st.none()] if nullable else []), JSON)


@st.composite
def with_variables(draw: st.DrawFn, schema: GraphQLSchema) -> tuple[str, dict[str, Any]]:
    """One root field whose every argument is a variable, and the variables' values."""
    query = schema.query_type
    assert query is not None
    name = draw(st.sampled_from(sorted(query.fields)))
    args = query.fields[name].args
    chosen = draw(st.lists(st.sampled_from(sorted(args)), unique=True)) if args else []
    chosen += [a for a, arg in args.items() if isinstance(arg.type, GraphQLNonNull)]
    chosen = list(dict.fromkeys(chosen))
    definitions = ", ".join(f"${a}: {args[a].type}" for a in chosen)
    arguments = ", ".join(f"{a}: ${a}" for a in chosen)
    document = (
        f"query Q{f'({definitions})' if chosen else ''} "
        f"{{ {name}{f'({arguments})' if chosen else ''} {{ __typename }} }}"
    )
    return document, {a: draw(typed(args[a].type)) for a in chosen}


def documents(schema: GraphQLSchema) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    generated = st.one_of(
        from_schema(schema, custom_scalars=SCALARS),
        from_schema(schema, custom_scalars=SCALARS, mode=Mode.NEGATIVE),
    )
    return generated.map(lambda document: (document, {})) | with_variables(schema)


def test_generated_documents_and_variables_are_answered_in_shape(
    wire: Wire, schema: GraphQLSchema
) -> None:
    @FUZZ
    @given(documents(schema), st.booleans())
    def run(request: tuple[str, dict[str, Any]], post: bool) -> None:
        document, variables = request
        what = f"{'POST' if post else 'GET'} {document!r} {variables!r}"[:400]
        if post:
            content = json.dumps({"query": document, "variables": variables}).encode()
            wire.send(what, "POST", "/graphql", content=content, headers=JSON_TYPE)
        else:
            params = {"query": document, "variables": json.dumps(variables)}
            wire.send(what, "GET", "/graphql", params=params, headers=ACCEPT_JSON)

    run()
    assert not wire.problems, report(wire.problems)


# --- raw bodies -------------------------------------------------------------------------

JSON_TYPE = {"content-type": "application/json"}
ACCEPT_JSON = {"accept": "application/json"}
NESTED = b"[" * 10_000 + b"]" * 10_000
TWO_OPERATIONS = "query A { trainStatus(key: 1) { key } } query B { __typename }"
LONG_OFFSET = (
    "query($o: Long!) { trainStatus(key: 1, consistency: {position: "
    '[{topic: "trains", partition: 1, offset: $o}]}) { key } }'
)
POSTS: dict[str, tuple[bytes, dict[str, str]]] = {
    "null": (b"null", JSON_TYPE),
    "a number": (b"5", JSON_TYPE),
    "an array": (b"[]", JSON_TYPE),
    "a string": (b'"{ __typename }"', JSON_TYPE),
    "true": (b"true", JSON_TYPE),
    "not UTF-8": (b'{"query": "{ __typename \xff }"}', JSON_TYPE),
    "UTF-16": ('{"query": "{ __typename }"}'.encode("utf-16"), JSON_TYPE),
    "truncated": (SEED[: len(SEED) // 2], JSON_TYPE),
    "empty": (b"", JSON_TYPE),
    "whitespace": (b"  \n ", JSON_TYPE),
    "nested variables": (
        b'{"query": "' + QUERY.encode() + b'", "variables": {"k": 1, "x": ' + NESTED + b"}}",
        JSON_TYPE,
    ),
    "nested objects": (
        b'{"query": "{ __typename }", "variables": ' + b'{"a": ' * 10_000 + b"1" + b"}" * 10_001,
        JSON_TYPE,
    ),
    "variables an array": (orjson.dumps({"query": QUERY, "variables": [7]}), JSON_TYPE),
    "variables a string": (orjson.dumps({"query": QUERY, "variables": "{}"}), JSON_TYPE),
    "query a number": (orjson.dumps({"query": 5}), JSON_TYPE),
    "query null": (orjson.dumps({"query": None}), JSON_TYPE),
    "no query": (b"{}", JSON_TYPE),
    "operationName a number": (orjson.dumps({"query": QUERY, "operationName": 5}), JSON_TYPE),
    "unknown operationName": (orjson.dumps({"query": QUERY, "operationName": "Nope"}), JSON_TYPE),
    "extensions a string": (orjson.dumps({"query": QUERY, "extensions": "x"}), JSON_TYPE),
    "text/plain": (SEED, {"content-type": "text/plain"}),
    "no content type": (SEED, {}),
    "a form": (b"query=%7B__typename%7D", {"content-type": "application/x-www-form-urlencoded"}),
    "multipart": (b"--b\r\n\r\n--b--\r\n", {"content-type": "multipart/form-data; boundary=b"}),
    "a bad charset": (SEED, {"content-type": "application/json; charset=ebcdic"}),
    "graphql-response+json accept": (
        SEED,
        {**JSON_TYPE, "accept": "application/graphql-response+json"},
    ),
    "a very long string": (
        orjson.dumps(
            {
                "query": "query($k: String!) { latestBooking(key: $k) { key } }",
                "variables": {"k": "x" * 3_000_000},
            }
        ),
        JSON_TYPE,
    ),
    "a lone surrogate in the query": (
        b'{"query": "{ latestBooking(key: \\"\\ud800\\") { key } }"}',
        JSON_TYPE,
    ),
    "a lone surrogate in a variable": (
        b'{"query": "query($k: String!) { latestBooking(key: $k) { key } }", '
        b'"variables": {"k": "\\udc00"}}',
        JSON_TYPE,
    ),
    "a lone surrogate in a batch": (
        b'{"query": "query($k: [String!]!) { latestBookingBatch(keys: $k) '
        b'{ entries { key } } }", "variables": {"k": ["a", "\\ud83d"]}}',
        JSON_TYPE,
    ),
    "NaN": (b'{"query": "' + QUERY.encode() + b'", "variables": {"k": NaN}}', JSON_TYPE),
    "Infinity": (b'{"query": "' + QUERY.encode() + b'", "variables": {"k": -Infinity}}', JSON_TYPE),
    "duplicate keys": (
        b'{"query": "{ __typename }", "query": "' + QUERY.encode() + b'"}',
        JSON_TYPE,
    ),
    "a Long past 64 bits": (
        json.dumps({"query": LONG_OFFSET, "variables": {"o": 2**100}}).encode(),
        JSON_TYPE,
    ),
    "a Long past 64 bits, as a string": (
        json.dumps({"query": LONG_OFFSET, "variables": {"o": str(2**63)}}).encode(),
        JSON_TYPE,
    ),
    "a Long of 5000 digits": (
        json.dumps({"query": LONG_OFFSET, "variables": {"o": "9" * 5000}}).encode(),
        JSON_TYPE,
    ),
    "an Int past 64 bits": (
        json.dumps({"query": QUERY, "variables": {"k": 10**23}}).encode(),
        JSON_TYPE,
    ),
    "two operations, no operationName": (orjson.dumps({"query": TWO_OPERATIONS}), JSON_TYPE),
    # persisted queries: the extension in every wrong shape, a miss, a mismatch, a hit
    "persistedQuery a string": (orjson.dumps({"extensions": {"persistedQuery": "x"}}), JSON_TYPE),
    "persistedQuery null": (orjson.dumps({"extensions": {"persistedQuery": None}}), JSON_TYPE),
    "persistedQuery empty": (orjson.dumps({"extensions": {"persistedQuery": {}}}), JSON_TYPE),
    "persistedQuery version 2": (orjson.dumps({"extensions": persisted(version=2)}), JSON_TYPE),
    "persistedQuery version true": (
        orjson.dumps({"extensions": persisted(version=True)}),
        JSON_TYPE,
    ),
    "sha256Hash a number": (orjson.dumps({"extensions": persisted(5)}), JSON_TYPE),
    "sha256Hash short": (orjson.dumps({"extensions": persisted("abc")}), JSON_TYPE),
    "sha256Hash not hex": (orjson.dumps({"extensions": persisted("z" * 64)}), JSON_TYPE),
    "sha256Hash a lone surrogate": (
        b'{"extensions": {"persistedQuery": {"version": 1, "sha256Hash": "\\ud800"}}}',
        JSON_TYPE,
    ),
    "a hash alone, unknown": (orjson.dumps({"extensions": persisted(UNKNOWN)}), JSON_TYPE),
    "a hash with another query": (
        orjson.dumps({"query": "{ __typename }", "extensions": persisted()}),
        JSON_TYPE,
    ),
    "a hash with its query": (PERSISTED_SEED, JSON_TYPE),
    "a hash alone, known": (
        orjson.dumps({"extensions": persisted(), "variables": {"k": 7}}),
        JSON_TYPE,
    ),
    "a hash alone, known, wrong operationName": (
        orjson.dumps({"extensions": persisted(), "operationName": "Nope"}),
        JSON_TYPE,
    ),
    "a hash alone, known, no variables": (orjson.dumps({"extensions": persisted()}), JSON_TYPE),
    "documentId alone, unknown": (orjson.dumps({"documentId": f"sha256:{UNKNOWN}"}), JSON_TYPE),
    "documentId without its prefix": (orjson.dumps({"documentId": HASH}), JSON_TYPE),
    "documentId a number": (orjson.dumps({"documentId": 5}), JSON_TYPE),
    "documentId and a hash that disagree": (
        orjson.dumps({"documentId": f"sha256:{UNKNOWN}", "extensions": persisted()}),
        JSON_TYPE,
    ),
    "a batch of hashes": (
        orjson.dumps(
            [
                {"extensions": persisted(UNKNOWN)},
                {"extensions": persisted(), "variables": {"k": 1}},
                {"query": QUERY, "extensions": persisted(), "variables": {"k": 2}},
            ]
        ),
        JSON_TYPE,
    ),
    "a batch with a mismatch": (
        orjson.dumps([{"query": QUERY}, {"query": "{ __typename }", "extensions": persisted()}]),
        JSON_TYPE,
    ),
}
GETS: dict[str, dict[str, str]] = {
    "no variables JSON": {"query": "{ __typename }", "variables": "["},
    "variables null": {"query": "{ __typename }", "variables": "null"},
    "variables a number": {"query": "{ __typename }", "variables": "5"},
    "a mutation": {"query": "mutation { __typename }"},
    "a subscription": {"query": "subscription { trainStatus(key: 1) { key } }"},
    "two operations": {"query": TWO_OPERATIONS},
    "no query": {"variables": "{}"},
    "an empty query": {"query": ""},
    "operationName only": {"operationName": "A"},
    "a long query": {"query": "{ " + "__typename " * 5_000 + "}"},
    "a hash alone": {"extensions": json.dumps(persisted()), "variables": '{"k": 3}'},
    "a hash alone, unknown": {"extensions": json.dumps(persisted(UNKNOWN))},
    "a hash with another query": {"query": "{ __typename }", "extensions": json.dumps(persisted())},
    "a hash with a mutation": {
        "query": "mutation { __typename }",
        "extensions": json.dumps(persisted(hashlib.sha256(b"mutation { __typename }").hexdigest())),
    },
    "a documentId alone": {"documentId": f"sha256:{HASH}", "variables": '{"k": 3}'},
    "a documentId malformed": {"documentId": "md5:abc"},
    "extensions not JSON": {"extensions": "{"},
}


def test_odd_bodies_and_parameters_are_answered_in_shape(wire: Wire) -> None:
    for what, (content, headers) in POSTS.items():
        wire.send(f"POST {what}", "POST", "/graphql", content=content, headers=headers)
    for what, params in GETS.items():
        wire.send(f"GET {what}", "GET", "/graphql", params=params, headers=ACCEPT_JSON)
    odd_url = "/graphql?query=%ff%fe&variables=%7B%22k%22%3A%20NaN%7D"
    wire.send("GET odd percent-escapes", "GET", odd_url, headers=ACCEPT_JSON)
    for method in ("PUT", "DELETE", "PATCH"):
        wire.send(f"{method} /graphql", method, "/graphql", content=SEED, headers=JSON_TYPE)
    assert not wire.problems, report(wire.problems)


@st.composite
def mutated(draw: st.DrawFn, seed: bytes) -> bytes:
    """The seed with a few bytes flipped, cut, inserted or deleted."""
    body = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(body)))
        edit = draw(st.sampled_from(["flip", "insert", "delete", "cut"]))
        if edit == "insert":
            body[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif edit == "cut":
            del body[at:]
        elif at < len(body):
            if edit == "flip":
                body[at] = draw(st.integers(0, 255))
            else:
                del body[at]
    return bytes(body)


def test_random_and_mutated_bytes_are_answered_in_shape(wire: Wire) -> None:
    @FUZZ
    @given(st.binary(max_size=200) | mutated(SEED) | mutated(PERSISTED_SEED))
    def run(body: bytes) -> None:
        wire.send(f"POST {body!r}", "POST", "/graphql", content=body, headers=JSON_TYPE)

    run()
    assert not wire.problems, report(wire.problems)


HASHES = st.sampled_from([HASH, HASH.upper(), UNKNOWN]) | st.text(max_size=70) | JSON
PERSISTED_QUERIES = JSON | st.fixed_dictionaries(
    {}, optional={"version": st.just(1) | JSON, "sha256Hash": HASHES}
)
EXTENSIONS = JSON | st.fixed_dictionaries({}, optional={"persistedQuery": PERSISTED_QUERIES})


def test_persisted_query_extensions_are_answered_in_shape(wire: Wire) -> None:
    @FUZZ
    @given(
        EXTENSIONS,
        st.none() | st.sampled_from([QUERY, "{ __typename }", "{ nope"]),
        st.none() | st.sampled_from([f"sha256:{HASH}", f"sha256:{UNKNOWN}"]) | JSON,
        st.booleans(),
    )
    def run(extensions: Any, query: str | None, document_id: Any, post: bool) -> None:
        request: dict[str, Any] = {"extensions": extensions, "variables": {"k": 7}}
        if query is not None:
            request["query"] = query
        if document_id is not None:
            request["documentId"] = document_id
        what = f"{'POST' if post else 'GET'} {request!r}"[:400]
        if post:
            content = json.dumps(request).encode()  # ints past 64 bits too
            wire.send(what, "POST", "/graphql", content=content, headers=JSON_TYPE)
        else:
            params = {
                k: v if isinstance(v, str) and k in ("query", "documentId") else json.dumps(v)
                for k, v in request.items()
            }
            wire.send(what, "GET", "/graphql", params=params, headers=ACCEPT_JSON)

    run()
    assert not wire.problems, report(wire.problems)


# --- internal endpoints -----------------------------------------------------------------


def internal_request(cluster: Served) -> st.SearchStrategy[list[SubQuery]]:
    """Sub-queries of real stores and partitions, their sizes up to twice the limits."""
    project = cluster.project
    pages = project.settings.max_page_size + SCAN_LOOKAHEAD
    keys = st.integers(-(2**63), 2**63 - 1) | st.text(max_size=12)
    limit = st.integers(-2, 2 * pages) | st.sampled_from([pages, pages + 1])
    query = st.one_of(
        st.builds(lambda ks: Get(tuple(ks)), st.lists(keys, max_size=5)),
        st.builds(
            Get,
            st.integers(0, 2).map(lambda n: tuple(range(MAX_SUBQUERY_KEYS + n))),
        ),
        st.builds(Range, st.none() | keys, st.none() | keys, limit, st.none() | keys),
        st.builds(Prefix, st.text(max_size=4), limit, st.none() | st.text(max_size=4)),
        st.builds(Windows, st.integers(0, 2**45), st.integers(0, 2**45), limit),
        st.builds(WindowsOfKey, keys, st.integers(0, 2**45), st.integers(0, 2**46)),
    )
    subquery = st.builds(
        SubQuery,
        id=st.integers(0, 99),
        partition=st.integers(-1, project.cluster.partitions),
        store=st.sampled_from(sorted(project.stores)) | st.text(max_size=6),
        query=query,
    )
    return st.lists(subquery, max_size=4)


def past_limits(q: SubQuery, project: Project) -> bool:
    """Whether a sub-query asks more than a GraphQL request could: the oracle of refusals."""
    most = project.settings.max_page_size
    match q.query:
        case Get(keys):
            return len(keys) > MAX_SUBQUERY_KEYS
        case Range(limit=limit) | Prefix(limit=limit) | Windows(limit=limit):
            return not 1 <= limit - SCAN_LOOKAHEAD <= most
        case WindowsOfKey(_, low, high):
            store = project.stores.get(q.store)
            windowed = store is not None and store.kind == "window"
            return windowed and (high - low) // store.window_advance_ms >= most  # type: ignore[union-attr]
    return False


def check_reply(wire: Wire, what: str, response: httpx.Response, asked: bytes) -> None:
    """An internal reply: refused in shape when a sub-query asks past the limits, else
    answers within them."""
    project = wire.project
    subqueries = decode_request(asked)
    refused = any(past_limits(q, project) for q in subqueries)
    body = response.json()
    code = body.get("error", {}).get("code") if isinstance(body, dict) else None
    if refused != (response.status_code == 400) or (refused and code not in LIMIT_CODES):
        wire.problem(f"internal {response.status_code}", f"{what} -> {response.text[:200]}")
        return
    if refused:
        return
    cap = project.settings.max_page_size + SCAN_LOOKAHEAD
    for q, answer in zip(subqueries, decode_answers(response.content), strict=True):
        rows = len(answer.rows or ())
        if rows > (len(q.query.keys) if isinstance(q.query, Get) else cap):
            wire.problem("internal reply past the limits", f"{what}: {rows} rows")


def test_internal_endpoints_refuse_garbage_in_shape_and_keep_to_the_limits(
    wire: Wire, cluster: Served
) -> None:
    headers = secret_headers(cluster.project.cluster.secret)
    bodies = [b"null", b"5", b"{}", b"[[]]", b"\xff\xfe", b"", NESTED, b"[" * 10 + b"1", SEED]

    def query(what: str, body: bytes) -> None:
        response = wire.send(
            what, "POST", "/internal/query", reply=True, content=body, headers=headers
        )
        if response is not None:
            check_reply(wire, what, response, body)

    for body in bodies:
        what = f"garbage {body[:40]!r}"
        wire.send(what, "POST", "/internal/query", content=body, headers=headers)
    for method, path in [("GET", "/internal/query"), ("PUT", "/internal/sync")]:
        wire.send(f"{method} {path}", method, path, headers=headers)
    for params in [{"changes": "x"}, {"changes": "1", "wait": "nan"}, {"changes": "1e999"}]:
        wire.send(f"status {params}", "GET", "/internal/status", params=params, headers=headers)

    @FUZZ
    @given(internal_request(cluster), st.booleans(), st.data())
    def run(subqueries: list[SubQuery], mutate: bool, data: st.DataObject) -> None:
        body = encode_request(subqueries)
        if mutate:
            body = data.draw(mutated(body) | st.binary(max_size=100))
        try:
            decode_request(body)
        except ValueError:
            wire.send(f"garbage {body[:200]!r}", "POST", "/internal/query", content=body,
                      headers=headers)  # fmt: skip
            return
        query(f"internal {body[:300]!r}", body)

    run()
    assert not wire.problems, report(wire.problems)


# --- afterwards -------------------------------------------------------------------------


def test_afterwards_the_node_is_alive_small_and_right(cluster: Served, rss_before: int) -> None:
    nodes, project = cluster.nodes, cluster.project
    for node_id in nodes.ids:
        assert nodes.client.get(f"{nodes.url(node_id)}/health").status_code == 200
    grown = nodes.rss(NODE) - rss_before
    assert grown < RSS_GROWTH_BOUND, f"node1 grew by {grown / 2**20:.0f} MiB"
    expected = {
        row[0]: row
        for part in oracle.expected_store(project, "trainStatus").values()
        for row in part
    }
    keys = sorted(expected)[:40:2] + [987_654_321]
    page = project.settings.max_page_size
    data = nodes.data(
        NODE,
        "query($ks: [Int!]!, $k: Int!, $n: Int!) "
        "{ one: trainStatus(key: $k) { record { key delay station } } "
        "many: trainStatusBatch(keys: $ks) { entries { key record { key delay station } } } "
        "scan: trainStatusRange(first: $n) { records { key delay station cancelled } } }",
        {"ks": keys, "k": keys[0], "n": page},
    )
    first = expected[keys[0]]
    assert data["one"] == {"record": {"key": first[0], "delay": first[1], "station": first[2]}}
    for key, entry in zip(keys, data["many"]["entries"], strict=True):
        row = expected.get(key)
        record = None if row is None else {"key": key, "delay": row[1], "station": row[2]}
        assert entry == {"key": key, "record": record}
    scanned = [tuple(r.values()) for r in data["scan"]["records"]]
    assert scanned == sorted(expected.values())[:page], "a page of a scan equals the oracle"
