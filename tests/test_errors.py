"""Bad input gets a precise GraphQL error with a code; the node keeps serving."""

from __future__ import annotations

import json

import pytest

from contracts.cluster_secret import SECRET_HEADER
from gateway.model import cursors
from gateway.wire.protocol import PROTOCOL_HEADER

WIDE = 'from: "2000-01-01T00:00:00Z", to: "2100-01-01T00:00:00Z"'
BAD = [
    ('{ noSuchStore(key: "a") { key } }', "GRAPHQL_VALIDATION_FAILED", "noSuchStore"),
    # a document of no operation is invalid, not one of several to choose from
    ("fragment F on Query { stores { name } }", "GRAPHQL_VALIDATION_FAILED", "never used"),
    ("type Foo { a: Int }", "GRAPHQL_VALIDATION_FAILED", "not executable"),
    (
        "query A { stores { name } } query B { stores { name } }",
        "BAD_USER_INPUT",
        "several operations: name one",
    ),
    ('{ trainStatus(key: "abc") { key } }', "GRAPHQL_VALIDATION_FAILED", "Int"),
    ("{ latestBooking(key: 12) { key } }", "GRAPHQL_VALIDATION_FAILED", "String"),
    (
        '{ latestBookingPrefix(prefix: "C", first: -1) { records { key } } }',
        "PAGE_SIZE_OUT_OF_RANGE",
        "between 1 and 1000",
    ),
    (
        '{ latestBookingPrefix(prefix: "C", first: 1000000) { records { key } } }',
        "PAGE_SIZE_OUT_OF_RANGE",
        "between 1 and 1000",
    ),
    (
        '{ latestBookingPrefix(prefix: "C", after: "not-a-cursor") { records { key } } }',
        "BAD_CURSOR",
        "not valid",
    ),
    (
        f'{{ latestBookingRange(after: "{cursors.encode("customerTotals", ["C1"])}") '
        "{ records { key } } }",
        "BAD_CURSOR",
        "another store",
    ),
    (
        f'{{ trainStatusRange(after: "{cursors.encode("trainStatus", ["x"])}") '
        "{ records { key } } }",
        "BAD_CURSOR",
        "int key",
    ),
    ('{ latestBookingRange(from: "b", to: "a") { records { key } } }', "INVALID_RANGE", "after"),
    (
        '{ hourlyRevenue(key: "C1", from: "2020-01-02T00:00:00Z", to: "2020-01-01T00:00:00Z") '
        "{ key } }",
        "INVALID_RANGE",
        "after",
    ),
    ('{ hourlyRevenue(key: "C1", ' + WIDE + ") { key } }", "WINDOW_RANGE_TOO_LARGE", "windows"),
    ("{ trainDelaysRange(partitions: [3, 42]) { records { key } } }", "UNKNOWN_PARTITION", "42"),
    (
        '{ trainStatus(key: 1, consistency: {position: [{topic: "trains", partition: 99, '
        "offset: 1}]}) { key } }",
        "UNKNOWN_PARTITION",
        "99",
    ),
    (
        '{ trainStatus(key: 1, consistency: {position: [{topic: "nope", partition: 1, '
        "offset: 1}]}) { key } }",
        "BAD_USER_INPUT",
        "nope",
    ),
    (
        '{ trainStatus(key: 1, consistency: {token: "%%%"}) { key } }',
        "BAD_CONSISTENCY_TOKEN",
        "token",
    ),
    (  # the decoder's own words (surrogates, padding) are not the client's business
        '{ trainStatus(key: 1, consistency: {token: "zz"}) { key } }',
        "BAD_CONSISTENCY_TOKEN",
        "consistency token is not one this gateway issued: it is not base64url-encoded JSON",
    ),
    (  # an empty token is none this gateway issued, not the absence of one
        '{ trainStatus(key: 1, consistency: {token: ""}) { key } }',
        "BAD_CONSISTENCY_TOKEN",
        "it is empty",
    ),
    ("{ trainStatus(key: 1, consistency: {maxLag: -5}) { key } }", "BAD_USER_INPUT", "maxLag"),
    (
        "{ trainStatus(key: 1, consistency: {maxAgeMs: -1}) { key } }",
        "BAD_USER_INPUT",
        "maxAgeMs must not be negative",
    ),
    ("{ latestBooking(key: ", "GRAPHQL_PARSE_FAILED", "Syntax Error"),
    # A Long is a decimal string or an integer (README: Scalars on the wire).
    *(
        (
            f"{{ trainStatus(key: 1, consistency: {{maxLag: {value}}}) {{ key }} }}",
            "GRAPHQL_VALIDATION_FAILED",
            "Long cannot represent",
        )
        for value in ['"0x10"', '" 5"', '"+5"', '"5.0"', "5.0", "true", '"9223372036854775808"']
    ),
    # A Float literal past a double's range is refused, not read as infinity (which a peer
    # would read as null from the internal request's JSON, and answer differently).
    *(
        (
            f"{{ latestBookingList(where: {{price: {condition}}}) {{ records {{ key }} }} }}",
            "GRAPHQL_VALIDATION_FAILED",
            "past a double's range",
        )
        for condition in [
            "{lt: 1e309}",
            "{gt: -1e309}",
            "{in: [1.5, 1e999]}",
            "{ne: 1" + "0" * 400 + "}",
        ]
    ),
]


@pytest.mark.parametrize(("query", "code", "text"), BAD)
def test_bad_input_gets_a_coded_error(served, query: str, code: str, text: str) -> None:
    body = served.nodes.gql("node1", query)
    assert body.get("errors"), body
    error = body["errors"][0]
    assert error["extensions"]["code"] == code, error
    assert text in error["message"], error


@pytest.mark.parametrize(
    "query",
    [
        "query($k: Int!) { trainStatus(key: $k) { key } }",  # a compiled plan
        "query($k: Int!) { trainStatus(key: $k) { key @include(if: true) } }",  # graphql-core
    ],
)
@pytest.mark.parametrize("accept", ["application/graphql-response+json", "application/json"])
def test_variables_that_do_not_fit_are_a_request_error_without_data(
    served, query: str, accept: str
) -> None:
    """GraphQL over HTTP: nothing ran, so the response has no data entry, not even null."""
    url = f"{served.nodes.url('node2')}/graphql"
    request = {"query": query, "variables": {"k": "seven"}}
    response = served.nodes.client.post(url, json=request, headers={"accept": accept})
    assert response.status_code == (400 if accept != "application/json" else 200)
    body = response.json()
    assert list(body) == ["errors"], body
    assert [e["extensions"]["code"] for e in body["errors"]] == ["BAD_USER_INPUT"]


LONG_OFFSET = """query($o: Long!) { trainStatus(key: 1, consistency: {position:
  [{topic: "trains", partition: 1, offset: $o}]}) { key } }"""


@pytest.mark.parametrize(
    "value", [True, 1.5, "0x10", "1e3", "", "-", " 7", "٣", str(2**63), -(2**63) - 1, [1]]
)
def test_a_long_variable_that_is_no_decimal_string_or_integer_is_bad_user_input(
    served, value: object
) -> None:
    body = served.nodes.gql("node3", LONG_OFFSET, {"o": value})
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT", error
    assert "Long cannot represent" in error["message"], error


@pytest.mark.parametrize("value", ["0", "-0", 0, "9007199254740993", 2**63 - 1])
def test_a_long_is_read_from_a_decimal_string_or_an_integer(served, value: object) -> None:
    body = served.nodes.gql("node1", LONG_OFFSET, {"o": value})
    assert not body.get("errors") and body["data"]["trainStatus"]["key"] == 1, body
    literal = json.dumps(value)  # "0" as a string literal, 0 as an integer literal
    query = f"{{ trainStatus(key: 1, consistency: {{maxLag: {literal}}}) {{ key }} }}"
    assert served.nodes.data("node2", query)["trainStatus"]["key"] == 1


def test_too_many_keys(served) -> None:
    keys = [f"k{i}" for i in range(10_001)]
    body = served.nodes.gql(
        "node3",
        "query($k: [String!]!) { latestBookingBatch(keys: $k) { entries { key } } }",
        {"k": keys},
    )
    assert body["errors"][0]["extensions"]["code"] == "TOO_MANY_KEYS"


def test_a_body_over_the_limit_is_refused_before_it_is_read_whole(served) -> None:
    limit = served.project.settings.max_request_bytes
    padding = " " * limit  # a valid document, one byte per space, just too long
    query = "{ trainDelaysRange(first: 1) { records { key } } }" + padding
    url = served.nodes.url("node2") + "/graphql"
    sized = served.nodes.client.post(url, json={"query": query})

    def chunks():  # no Content-Length: the node counts what arrives
        yield b'{"query": "{ trainDelaysRange(first: 1) { records { key } } }'
        for _ in range(limit // 65_536 + 2):
            yield b" " * 65_536
        yield b'"}'

    streamed = served.nodes.client.post(
        url, content=chunks(), headers={"content-type": "application/json"}
    )
    for response in (sized, streamed):
        assert response.status_code == 413, response.text[:200]
        error = response.json()["errors"][0]
        assert error["extensions"]["code"] == "REQUEST_TOO_LARGE"
        assert str(limit) in error["message"]
    fits = served.nodes.data("node2", "{ trainDelaysRange(first: 1) { records { key } } }")
    assert len(fits["trainDelaysRange"]["records"]) == 1


def test_one_bad_field_does_not_spoil_the_others(served) -> None:
    body = served.nodes.gql(
        "node1",
        '{ bad: latestBookingPrefix(prefix: "C", first: 0) '
        "{ records { key } } good: trainStatusRange(first: 2) "
        "{ records { key } } }",
    )
    assert body["errors"][0]["path"] == ["bad"]
    assert len(body["data"]["good"]["records"]) == 2


def test_internal_endpoints_refuse_calls_without_the_cluster_secret(served) -> None:
    client, url = served.nodes.client, served.nodes.url("node1")
    for method, path in [
        ("POST", "/internal/query"),
        ("GET", "/internal/status"),
        ("POST", "/internal/sync"),
        ("POST", "/internal/reload"),
        ("GET", "/internal/metrics"),
    ]:
        for headers in [{}, {SECRET_HEADER: "wrong"}]:
            response = client.request(method, url + path, headers=headers, content=b"[]")
            assert response.status_code == 401, (path, response.text)
            assert response.json()["error"]["code"] == "UNAUTHENTICATED"


def test_a_call_of_a_protocol_version_the_node_does_not_read_is_refused_in_shape(
    served,
) -> None:
    """What a node of a later release might send: refused as not the protocol (the caller
    fails over), and a call that states no version is a release's before the header."""
    client, url = served.nodes.client, served.nodes.url("node1") + "/internal/query"
    secret = {SECRET_HEADER: served.project.cluster.secret}
    for stated, status in (("2", 400), (None, 200), ("1", 200)):
        version = {} if stated is None else {PROTOCOL_HEADER: stated}
        response = client.post(url, headers={**secret, **version}, content=b"[]")
        assert response.status_code == status, (stated, response.text)
    refused = client.post(url, headers={**secret, PROTOCOL_HEADER: "2"}, content=b"[]").json()
    assert refused["error"] == {
        "code": "BAD_REQUEST",
        "message": "not the internal protocol: version 2; this node reads [1]",
    }


def test_nodes_keep_serving_after_bad_input(served) -> None:
    for node in served.nodes.ids:
        data = served.nodes.data(node, "{ trainDelaysRange(first: 1) { records { key } } }")
        assert len(data["trainDelaysRange"]["records"]) == 1
