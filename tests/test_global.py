"""Global stores (contracts/chains.py): every node holds every partition of them and answers
their queries alone, with no internal request, each partition's answer stating the
positions it was read at; all of it against the oracle computed from the raw log."""

from __future__ import annotations

from typing import Any

import pytest

from contracts import chains
from contracts.partitioner import partition_for
from tests import oracle, wire
from tests.wire import as_row, selection

NODES = ["node1", "node2", "node3"]
GLOBAL = ["timetable", "tripTotals"]
META = "meta { partitions { partition node role version failure position { topic offset } } }"


def expected_rows(served, name: str) -> dict[Any, tuple]:
    return {r[0]: r for rows in oracle.expected_store(served.project, name).values() for r in rows}


def answered_alone(body: dict[str, Any], node: str) -> None:
    """The request's every sub-query ran on `node` itself, in one round."""
    assert not body.get("errors"), body["errors"]
    (round_,) = body["extensions"]["routing"]["rounds"]
    assert set(round_) == {node}


def check_partitions(served, meta: dict[str, Any], node: str) -> None:
    positions = oracle.expected_positions(served.project)
    for part in meta["partitions"]:
        assert part["node"] == node and part["role"] == "ACTIVE" and part["failure"] is None
        assert wire.offsets(part["position"]) == positions[part["partition"]]


@pytest.mark.parametrize("node", NODES)
def test_every_node_answers_every_key_of_a_global_store_alone(served, node: str) -> None:
    for name in GLOBAL:
        store = served.project.stores[name]
        assert store.is_global
        expected = expected_rows(served, name)
        keys = ["no such trip", *expected]
        query = (
            f"query($keys: [String!]!) {{ {name}Batch(keys: $keys) {{ entries {{ key partition "
            f"failure record {{ {selection(store)} }} }} {META} }} }}"
        )
        body = served.nodes.gql(node, query, {"keys": keys})
        answered_alone(body, node)
        result = body["data"][f"{name}Batch"]
        assert len(expected) > 10 and [e["key"] for e in result["entries"]] == keys
        for entry in result["entries"]:
            assert entry["failure"] is None
            assert entry["partition"] == partition_for(entry["key"], "string", 9)
            row = expected.get(entry["key"])
            assert (None if entry["record"] is None else as_row(store, entry["record"])) == (
                pytest.approx(row)
            )
        check_partitions(served, result["meta"], node)


@pytest.mark.parametrize("node", NODES)
def test_a_global_store_is_listed_by_value_without_leaving_the_node(served, node: str) -> None:
    store = served.project.stores["timetable"]
    rows = sorted(expected_rows(served, "timetable").values(), key=lambda r: (-r[2], r[0]))
    query = (
        f"{{ timetableList(orderBy: [FARE_DESC], first: 10) {{ records {{ {selection(store)} }} "
        f"{META} }} }}"
    )
    body = served.nodes.gql(node, query)
    answered_alone(body, node)
    page = body["data"]["timetableList"]
    got = [as_row(store, r) for r in page["records"]]
    assert len(got) == 10 and all(g == pytest.approx(e) for g, e in zip(got, rows, strict=False))
    assert sorted(p["partition"] for p in page["meta"]["partitions"]) == list(range(9))
    check_partitions(served, page["meta"], node)


def test_every_node_holds_every_global_chain_and_only_its_own_partitions(served) -> None:
    project = served.project
    for node in NODES:
        held = {int(p) for p in served.nodes.status(node)["partitions"]}
        own = set(project.cluster.hosted_by(node))
        assert held == own | set(chains.global_chains(project))
        ready = served.nodes.client.get(f"{served.nodes.url(node)}/ready").json()
        assert ready["ready"] and set(ready["versions"]) == {str(p) for p in own}
