"""Limits and GraphQL over HTTP on real nodes: requests measured and refused before any work
(fragment fan-out, alias amplification), the deadline, cancellation when the client leaves,
media types and status codes, batches."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from contracts.partitioner import partition_for
from resolvers.schema.costs import PAGE_ROW_WEIGHT
from spark_pipeline.spark import LazySpark
from tests import oracle, wire
from tests.nodes import Served, metric, serve

pytestmark = pytest.mark.e2e

SETTINGS = "request_timeout_s = 1.0\ninternal_timeout_s = 5.0\nhealth_interval_s = 0.5"
TOTALS = "query T($keys: [String!]!) { %s }"
BATCH = "customerTotalsBatch(keys: $keys) { entries { key record { bookings revenue } } }"
GRAPHQL_RESPONSE = "application/graphql-response+json"
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def cluster(spark: LazySpark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = serve(tmp_path_factory.mktemp("limits"), spark, seed=5, settings=SETTINGS)
    yield served
    served.nodes.stop_all()


def totals(cluster: Served) -> dict[str, tuple[Any, ...]]:
    parts = oracle.expected_store(cluster.project, "customerTotals")
    return {row[0]: row for rows in parts.values() for row in rows}


def post(cluster: Served, node: str, body: Any, **headers: str) -> httpx.Response:
    return cluster.nodes.client.post(
        f"{cluster.nodes.url(node)}/graphql", json=body, headers=headers
    )


def fan_out(levels: int, leaf: str) -> str:
    """A document of a few hundred bytes whose fragments expand to 2**levels leaves."""
    fragments = [f"fragment F0 on Query {{ {leaf} }}"]
    fragments += [f"fragment F{i} on Query {{ ...F{i - 1} ...F{i - 1} }}" for i in range(1, levels)]
    return f"{{ ...F{levels - 1} }}\n" + "\n".join(fragments)


def codes(body: dict[str, Any]) -> list[str]:
    return [e["extensions"]["code"] for e in body.get("errors", [])]


def test_a_document_whose_fragments_fan_out_is_refused_at_once(cluster: Served) -> None:
    for leaf, code in (
        ("a: __typename", "GRAPHQL_VALIDATION_FAILED"),  # 2**60 aliases
        ('customerTotals(key: "C1") { key }', "COST_LIMIT_EXCEEDED"),  # 2**60 lookups
    ):
        started = time.monotonic()
        body = post(cluster, "node1", {"query": fan_out(60, leaf)}).json()
        assert codes(body) == [code], body
        assert time.monotonic() - started < 1.0  # Strawberry's limiters took minutes
    small = fan_out(4, 'customerTotals(key: "C1") { key }')  # 8 lookups: allowed
    answered = post(cluster, "node1", {"query": small}).json()
    assert "errors" not in answered and answered["data"] == {"customerTotals": {"key": "C1"}}


def test_aliases_over_a_large_batch_are_refused_before_any_lookup(cluster: Served) -> None:
    keys = [f"C{i:06d}" for i in range(10_000)]
    aliased = TOTALS % " ".join(f"a{i}: {BATCH}" for i in range(200))
    rss = cluster.nodes.rss("node2")
    started = time.monotonic()
    body = post(cluster, "node2", {"query": aliased, "variables": {"keys": keys}}).json()
    assert codes(body) == ["COST_LIMIT_EXCEEDED"]
    extensions = body["errors"][0]["extensions"]
    assert extensions["cost"] == 200 * 10_000 * 3 and extensions["limit"] == 100_000
    assert time.monotonic() - started < 1.0
    assert cluster.nodes.rss("node2") - rss < 32 * 2**20
    # One such batch is within the limit, and right.
    expected = totals(cluster)
    one = post(cluster, "node2", {"query": TOTALS % BATCH, "variables": {"keys": keys}}).json()
    assert one.get("data"), one.get("errors")
    for entry in one["data"]["customerTotalsBatch"]["entries"]:
        row = expected.get(entry["key"])
        got = entry["record"]
        assert (got and (wire.long(got["bookings"]), got["revenue"])) == (
            row and pytest.approx(row[1:3])
        )


def test_a_row_of_a_page_weighs_what_it_takes_to_serve(cluster: Served) -> None:
    """A page row takes several times a batch key's time (bench.calibrate),
    so it weighs more: 52 one-value pages of 1000 rows are refused, not run for seconds."""
    page = "records { key }"
    pages = [f"r{i}: latestBookingRange(first: 1000) {{ {page} }}" for i in range(26)]
    pages += [
        f'p{i}: latestBookingPrefix(prefix: "C", first: 1000) {{ {page} }}' for i in range(26)
    ]
    body = post(cluster, "node1", {"query": "{ " + " ".join(pages) + " }"}).json()
    assert codes(body) == ["COST_LIMIT_EXCEEDED"]
    assert body["errors"][0]["extensions"]["cost"] == 52 * 1000 * PAGE_ROW_WEIGHT


def test_a_bulk_request_answers_in_slices_what_small_requests_answer(cluster: Served) -> None:
    """A request over bulk_request_cost runs in slices (keys partitioned, looked up, completed
    and encoded SLICE at a time): its answer is the one small requests give, in order."""
    known = sorted(totals(cluster))
    keys = [k for i in range(3_000) for k in (known[i * 7 % len(known)], f"X{i}")][:3_000]
    entries = "entries { key partition record { bookings revenue } }"
    asked = "meta { partial partitionsAsked partitions { partition } }"
    selection = f"__typename a: {entries} b: {entries} {asked}"
    query = "query T($keys: [String!]!) { customerTotalsBatch(keys: $keys) { %s } }"
    bulk = post(cluster, "node1", {"query": query % selection, "variables": {"keys": keys}})
    answer = bulk.json()["data"]["customerTotalsBatch"]  # cost 3,000 x 2 x 4 > 1,000
    small = []
    for start in range(0, len(keys), 100):  # cost 100 x 4 x 2: the interactive lane
        some = {"keys": keys[start : start + 100]}
        part = post(cluster, "node1", {"query": query % f"a: {entries}", "variables": some})
        small += part.json()["data"]["customerTotalsBatch"]["a"]
    assert answer["__typename"] == "CustomerTotalsBatch"
    assert answer["a"] == answer["b"] == small
    assert [e["key"] for e in answer["a"]] == keys
    meta = answer["meta"]  # of the whole batch, however many slices completed it
    assert not meta["partial"] and meta["partitionsAsked"] == 9
    assert [p["partition"] for p in meta["partitions"]] == list(range(9))
    expected = totals(cluster)
    for entry in answer["a"]:
        row, got = expected.get(entry["key"]), entry["record"]
        assert (got and (wire.long(got["bookings"]), got["revenue"])) == (
            row and pytest.approx(row[1:3])
        )


def test_a_hung_peer_meets_the_deadline_and_a_client_that_leaves_cancels(
    cluster: Served,
) -> None:
    keys = sorted(totals(cluster))
    query = {"query": TOTALS % BATCH, "variables": {"keys": keys}}  # every partition
    before = cluster.nodes.metrics("node2")
    hung = [cluster.nodes.processes.procs[n] for n in ("node1", "node3")]
    for proc in hung:  # partitions 2, 5 and 8 have no replica left that answers
        proc.send_signal(signal.SIGSTOP)
    try:
        outcome: dict[str, Any] = {}

        def leave() -> None:  # waits 0.3 s on node2, then closes its connection
            try:
                httpx.post(f"{cluster.nodes.url('node2')}/graphql", json=query, timeout=0.3)
            except httpx.TimeoutException as error:
                outcome["left"] = error

        leaving = threading.Thread(target=leave)
        leaving.start()
        started = time.monotonic()
        body = post(cluster, "node2", query).json()
        took = time.monotonic() - started
        leaving.join()
        assert codes(body) == ["DEADLINE_EXCEEDED"] and body["data"] is None, body
        assert 0.9 < took < 3.0, took  # the deadline (1 s), not the peers' timeout (5 s)
        assert "left" in outcome
        name, labels = "stategate_graphql_requests_total", {"outcome": "cancelled"}
        deadline, cancelled = time.monotonic() + 5, 0.0
        while time.monotonic() < deadline and not cancelled:
            after = cluster.nodes.metrics("node2")
            cancelled = metric(after, name, operation="anonymous", **labels) - metric(
                before, name, operation="anonymous", **labels
            )
            time.sleep(0.2)
    finally:
        for proc in hung:
            proc.send_signal(signal.SIGCONT)
    assert cancelled >= 1, "node2 did not cancel the request of the client that left"


def test_a_known_read_through_a_hung_peer_meets_the_deadline_and_cancels(
    cluster: Served,
) -> None:
    """A one-key read node2 prepared before, of a key whose replicas are both hung, takes
    the short path through the router (resolvers/transport/known.py): it is stopped at the
    deadline as the general path stops it, and a client that leaves cancels it."""
    query = "query One($k: String!) { customerTotals(key: $k) { key record { revenue } } }"
    keys = sorted(totals(cluster))
    hung_key = next(k for k in keys if partition_for(k, "string", 9) == 2)
    for key in keys[:3]:  # prepared, then answered from its bytes
        assert (
            "errors" not in post(cluster, "node2", {"query": query, "variables": {"k": key}}).json()
        )
    name = "stategate_graphql_read_routed_total"
    before = cluster.nodes.metrics("node2")
    hung = [cluster.nodes.processes.procs[n] for n in ("node1", "node3")]
    for proc in hung:  # partition 2 has no replica left that answers
        proc.send_signal(signal.SIGSTOP)
    try:
        asked = {"query": query, "variables": {"k": hung_key}}
        started = time.monotonic()
        body = post(cluster, "node2", asked).json()
        took = time.monotonic() - started
        assert codes(body) == ["DEADLINE_EXCEEDED"] and body["data"] is None, body
        assert body["extensions"]["routing"]["rounds"] == [], body
        assert 0.9 < took < 3.0, took  # the deadline (1 s), not the peers' timeout (5 s)
        with pytest.raises(httpx.TimeoutException):  # waits 0.3 s, then closes its connection
            httpx.post(f"{cluster.nodes.url('node2')}/graphql", json=asked, timeout=0.3)
        labels = {"operation": "anonymous", "outcome": "cancelled"}
        counter = "stategate_graphql_requests_total"
        deadline, cancelled = time.monotonic() + 5, 0.0
        while time.monotonic() < deadline and not cancelled:
            after = cluster.nodes.metrics("node2")
            cancelled = metric(after, counter, **labels) - metric(before, counter, **labels)
            time.sleep(0.2)
    finally:
        for proc in hung:
            proc.send_signal(signal.SIGCONT)
    assert cancelled >= 1, "node2 did not cancel the known read of the client that left"
    assert metric(after, name) - metric(before, name) >= 1, "the short path answered"
    failed = {"operation": "anonymous", "outcome": "error"}  # no operationName was sent
    assert metric(after, counter, **failed) - metric(before, counter, **failed) >= 1


def test_media_types_and_status_codes(cluster: Served) -> None:
    url = f"{cluster.nodes.url('node1')}/graphql"
    client = cluster.nodes.client
    refused = {"query": "{ nope }"}
    modern = client.post(url, json=refused, headers={"accept": GRAPHQL_RESPONSE})
    assert (modern.status_code, modern.headers["content-type"]) == (400, GRAPHQL_RESPONSE)
    assert codes(modern.json()) == ["GRAPHQL_VALIDATION_FAILED"] and "data" not in modern.json()
    legacy = client.post(url, json=refused)
    assert (legacy.status_code, legacy.headers["content-type"]) == (200, "application/json")
    ran = client.post(url, json={"query": "{ __typename }"}, headers={"accept": GRAPHQL_RESPONSE})
    assert ran.status_code == 200 and ran.json()["data"] == {"__typename": "Query"}
    mutation = client.get(url, params={"query": "mutation { x }"})
    assert (mutation.status_code, codes(mutation.json())) == (405, ["METHOD_NOT_ALLOWED"])
    assert mutation.headers["allow"] == "POST"
    for status, code, response in (
        (415, "UNSUPPORTED_MEDIA_TYPE", client.post(url, content=b"{ __typename }")),
        (400, "BAD_REQUEST", client.post(url, content=b"null", headers=JSON)),
        (400, "BAD_REQUEST", client.post(url, content=b'{"query": "\xff"}', headers=JSON)),
        (400, "BAD_REQUEST", client.post(url, json=[1] * 11)),  # past max_batch_size
        (405, "METHOD_NOT_ALLOWED", client.put(url, json=refused)),
    ):
        assert (response.status_code, codes(response.json())) == (status, [code]), response.text
    two = client.post(url, json={"query": "query A { __typename } query B { __typename }"})
    assert codes(two.json()) == ["BAD_USER_INPUT"]


def test_a_batch_is_answered_in_order_with_one_routed_batch(cluster: Served) -> None:
    expected = totals(cluster)
    keys = sorted(expected)[:6]
    one = "query One($key: String!) { customerTotals(key: $key) { key record { bookings } } }"
    batch = [{"query": one, "variables": {"key": key}} for key in keys]
    batch.append({"query": "{ nope }"})
    answers = post(cluster, "node3", batch).json()
    assert len(answers) == len(keys) + 1
    for key, answer in zip(keys, answers, strict=False):
        assert answer["data"]["customerTotals"] == {
            "key": key,
            "record": {"bookings": str(expected[key][1])},
        }
    assert codes(answers[-1]) == ["GRAPHQL_VALIDATION_FAILED"]
    # The six lookups shared one routed batch: at most one internal request per peer.
    routings = [a["extensions"]["routing"] for a in answers[:-1]]
    assert all(r == routings[0] for r in routings), json.dumps(routings)
    assert routings[0]["internalRequests"] <= 2, json.dumps(routings)
