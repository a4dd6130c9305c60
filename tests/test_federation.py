"""stategate as an Apollo Federation 2 subgraph (the `federation` setting), in a real
supergraph: Apollo's gateway (npm @apollo/gateway, composing by introspection) over a
3-node cluster and a second subgraph of customers (npm @apollo/subgraph) whose totals and
latest booking stategate resolves. Answers are checked against the oracle's rows; a key
with no record is null (its fields, as the gateway merges it), not an error; `_entities`
reads in one routed batch."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from contracts.project import Store
from spark_pipeline.spark import LazySpark
from stategate.launcher import free_ports
from tests import oracle
from tests.nodes import Served, serve

HERE = Path(__file__).parent / "federation"
READY_S = 60.0
MISSING = "C-no-such-customer"
SUPERGRAPH_QUERY = """{ customers { id name
  totals { key bookings revenue seats }
  latest { key trip price seats } } }"""


def records(served: Served, name: str) -> dict[Any, dict[str, Any]]:
    """The oracle's records of a store, by key, as the API shows them (a Long as a string)."""
    store: Store = served.project.stores[name]
    parts = oracle.expected_store(served.project, name)
    return {row[0]: {"key": row[0], **{column: _wire(store.columns[column], value)
                     for column, value in zip(store.columns, row[1:], strict=False)}}
            for rows in parts.values() for row in rows}  # fmt: skip


def _wire(kind: str, value: Any) -> Any:
    return str(value) if kind == "long" and value is not None else value


def _started(command: list[str], banner: str) -> subprocess.Popen[str]:
    """A node.js server of tests/federation/, once it prints `banner`."""
    if not (HERE / "node_modules").is_dir():
        pytest.fail("tests/federation/node_modules is missing: `make test` installs it (npm ci)")
    proc = subprocess.Popen(
        ["node", *command], cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if banner in line:
            return proc
    proc.wait(READY_S)
    raise AssertionError(f"{command[0]} did not start:\n{''.join(lines)}")


@pytest.fixture(scope="module")
def cluster(spark: LazySpark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = serve(
        tmp_path_factory.mktemp("federation"), spark, seed=3, settings="federation = true"
    )
    yield served
    served.nodes.stop_all()


@pytest.fixture(scope="module")
def supergraph(cluster: Served) -> Iterator[tuple[str, list[str]]]:
    """The gateway's URL, and the customer ids the second subgraph serves."""
    totals = records(cluster, "customerTotals")
    ids = [*sorted(totals)[:20], MISSING]
    accounts_port, gateway_port = free_ports(2)
    servers = [_started(["accounts.mjs", str(accounts_port), json.dumps(ids)], "ready")]
    try:
        subgraphs = [
            f"stategate={cluster.nodes.url('node2')}/graphql",
            f"accounts=http://127.0.0.1:{accounts_port}/",
        ]
        servers.append(_started(["gateway.mjs", str(gateway_port), *subgraphs], "ready"))
        yield f"http://127.0.0.1:{gateway_port}/", ids
    finally:
        for server in servers:
            server.terminate()
            server.wait(10)


def test_a_query_across_both_subgraphs_answers_as_the_oracle(
    cluster: Served, supergraph: tuple[str, list[str]]
) -> None:
    url, ids = supergraph
    answer = httpx.post(url, json={"query": SUPERGRAPH_QUERY}, timeout=30).json()
    assert "errors" not in answer, answer
    totals, latest = records(cluster, "customerTotals"), records(cluster, "latestBooking")
    customers = answer["data"]["customers"]
    assert [c["id"] for c in customers] == ids
    for customer in customers:
        key = customer["id"]
        assert customer["name"] == f"Customer {key}"
        for field, source in (("totals", totals), ("latest", latest)):
            # a key with no record: the reference the other subgraph made, its fields null
            want = source.get(key, {"key": key})
            assert customer[field] == {f: want.get(f) for f in customer[field]}, (key, field)
    assert customers[-1]["totals"]["bookings"] is None  # the missing key: no error


def entities(cluster: Served, node: str, representations: list[dict[str, Any]]) -> Any:
    query = """query($r: [_Any!]!) { _entities(representations: $r) {
      __typename ... on CustomerTotals { key bookings } ... on LatestBooking { key trip } } }"""
    return cluster.nodes.client.post(
        f"{cluster.nodes.url(node)}/graphql",
        json={"query": query, "variables": {"r": representations}},
    ).json()


def test_entities_read_in_one_routed_batch_with_their_positions(cluster: Served) -> None:
    totals, latest = records(cluster, "customerTotals"), records(cluster, "latestBooking")
    keys = sorted(totals)
    representations = [
        {"__typename": "CustomerTotals" if i % 2 else "LatestBooking", "key": key}
        for i, key in enumerate([*keys, MISSING])
    ]
    answer = entities(cluster, "node1", representations)
    assert "errors" not in answer, answer
    found = answer["data"]["_entities"]
    for representation, entity in zip(representations, found, strict=True):
        key, kind = representation["key"], representation["__typename"]
        source = totals if kind == "CustomerTotals" else latest
        if key not in source:
            assert entity is None, key
            continue
        field = "bookings" if kind == "CustomerTotals" else "trip"
        assert entity == {"__typename": kind, "key": key, field: source[key][field]}, key
    routing = answer["extensions"]["routing"]
    assert len(routing["rounds"]) == 1 and routing["internalRequests"] <= 3, routing
    assert answer["extensions"]["consistencyToken"]


def test_a_representation_the_store_cannot_read_is_an_error_at_its_place(
    cluster: Served,
) -> None:
    key = sorted(records(cluster, "customerTotals"))[0]
    answer = entities(
        cluster,
        "node3",
        [{"__typename": "CustomerTotals", "key": 7}, {"__typename": "CustomerTotals", "key": key}],
    )
    (error,) = answer["errors"]
    assert error["path"] == ["_entities", 0]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert answer["data"]["_entities"][0] is None
    assert answer["data"]["_entities"][1]["key"] == key


def test_more_representations_of_a_store_than_a_field_may_ask_for_is_one_error(
    cluster: Served,
) -> None:
    most = cluster.project.settings.max_keys_per_field
    representations = [{"__typename": "CustomerTotals", "key": f"C-{i}"} for i in range(most + 1)]
    answer = entities(cluster, "node2", representations)
    (error,) = answer["errors"]
    assert error["extensions"]["code"] == "TOO_MANY_KEYS", error
    assert error["path"] == ["_entities"] and answer["data"] is None


def test_the_subgraph_describes_its_entities(cluster: Served) -> None:
    answer = cluster.nodes.client.post(
        f"{cluster.nodes.url('node1')}/graphql", json={"query": "{ _service { sdl } }"}
    ).json()
    sdl = answer["data"]["_service"]["sdl"]
    assert 'type CustomerTotals @key(fields: "key")' in sdl
    assert 'type LatestBooking @key(fields: "key")' in sdl
    assert "federation/v2.5" in sdl
