"""clients/python/routing.py on its own (the integration is in tests/test_clients.py): its
partitioner is Kafka's, as contracts/partitioner.py computes it, for every key type; it
finds the keys of a request wherever GraphQL lets a document put them; and it chooses nodes
as documented, down nodes last, the request's own URL always among them."""

from __future__ import annotations

import json
from typing import Any

import httpx
from hypothesis import given
from hypothesis import strategies as st

from clients.python import routing
from contracts.partitioner import partition_for

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
MAP = {
    "assignment_version": 3,
    "partitions_count": 9,
    "nodes": [{"id": f"node{i}", "address": f"127.0.0.1:810{i}"} for i in (1, 2, 3)],
    "partitions": [
        {
            "partition": p,
            "replicas": [
                {"node": f"node{p % 3 + 1}", "role": "ACTIVE", "alive": True},
                {"node": f"node{(p + 1) % 3 + 1}", "role": "STANDBY", "alive": True},
            ],
        }
        for p in range(9)
    ],
    "routes": [
        {"field": "totals", "argument": "key", "topic": "t", "key_type": "string"},
        {"field": "totalsBatch", "argument": "keys", "topic": "t", "key_type": "string"},
        {"field": "trains", "argument": "key", "topic": "u", "key_type": "long"},
    ],
}


@given(st.text(), st.integers(1, 64))
def test_string_keys_partition_as_kafka(key: str, partitions: int) -> None:
    assert routing.partition_of(key, "string", partitions) == partition_for(
        key, "string", partitions
    )


@given(INT32, INT64, st.integers(1, 64))
def test_int_and_long_keys_partition_as_kafka(small: int, big: int, partitions: int) -> None:
    assert routing.partition_of(small, "int", partitions) == partition_for(small, "int", partitions)
    assert routing.partition_of(big, "long", partitions) == partition_for(big, "long", partitions)
    assert routing.partition_of(str(big), "long", partitions) == partition_for(
        big, "long", partitions
    ), "a Long arrives as a decimal string"


def keys(query: str, variables: dict[str, Any] | None = None, name: str | None = None) -> Any:
    cluster = routing.ClusterMap.read(MAP, "http")
    body = {"query": query, "variables": variables, "operationName": name}
    return routing.keys_asked(body, cluster.routes)


def test_keys_are_found_in_variables_literals_lists_aliases_and_fragments() -> None:
    assert keys("query Q($k: String!) { totals(key: $k) { key } }", {"k": "a"}) == [("string", "a")]
    assert keys('{ x: totals(key: "a") { key } y: totals(key: "b") { key } }') == [
        ("string", "a"),
        ("string", "b"),
    ]
    assert keys('{ totalsBatch(keys: ["a", "b"]) { entries { key } } }') == [
        ("string", "a"),
        ("string", "b"),
    ]
    assert keys("query Q($ks: [String!]!) { totalsBatch(keys: $ks) { meta { partial } } }",
                {"ks": ["c"]}) == [("string", "c")]  # fmt: skip
    spread = "query Q { ...F } fragment F on Query { ... on Query { trains(key: 12) { key } } }"
    assert keys(spread) == [("long", 12)]
    assert keys("query Q($k: Long!) { trains(key: $k) { key } }", {"k": "9007199254740993"}) == [
        ("long", "9007199254740993")
    ]


def test_what_is_no_key_routes_nowhere() -> None:
    assert keys("{ stores { name } }") == []
    assert keys('{ totalsPrefix(prefix: "a") { key } }') == []
    assert keys("{ totals(key: ") == [], "a document that does not parse: the node says why"
    assert keys('{ totals(keys: ["a"]) { key } }') == [], "not the route's argument"
    assert keys("query Q($k: Long!) { trains(key: $k) { key } }", {"k": "x"}) == []
    for beyond in (2**63, -(2**63) - 1, 1.5, True):  # no Long: the node refuses it
        assert keys("query Q($k: Long!) { trains(key: $k) { key } }", {"k": beyond}) == []
    two = 'query A { totals(key: "a") { key } } query B { totals(key: "b") { key } }'
    assert keys(two) == [], "two operations and none named"
    assert keys(two, name="B") == [("string", "b")]


def test_nodes_are_chosen_by_the_keys_replicas_down_ones_last() -> None:
    transport = routing.RoutingTransport(["http://127.0.0.1:8101"])
    transport.map = routing.ClusterMap.read(MAP, "http")
    own = httpx.URL("http://127.0.0.1:8102/graphql")
    key = "a"
    partition = partition_for(key, "string", 9)
    active, standby = (f"http://127.0.0.1:810{(partition + i) % 3 + 1}" for i in (0, 1))
    body = json.dumps({"query": "query Q($k: String!) { totals(key: $k) { key } }",
                       "variables": {"k": key}}).encode()  # fmt: skip
    targets = transport._targets(body, own)
    assert targets[:2] == [active, standby] and len(targets) == 3
    assert transport.routed == 1
    transport.down[active] = float("inf")
    assert transport._targets(body, own)[0] == standby
    assert transport._targets(body, own)[-1] == active, "a node found down is tried last"
    transport.down.clear()
    nothing = json.dumps({"query": "{ stores { name } }"}).encode()
    assert transport._targets(nothing, own)[0] == "http://127.0.0.1:8102"
    assert transport.routed == 3, "a standby of the keys is where they are too"
