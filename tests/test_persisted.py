"""Persisted operations on real nodes: automatic persisted queries over POST, GET and
WebSocket (a miss, the query sent with its hash, then the hash alone), a hash that is not the
query's, the bound on what a node remembers; the registry of an operations file, the
allow-list that runs nothing else, and a bad operations file refused at start. Answers are
checked against the oracle."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from contracts import project as projects
from spark_pipeline.spark import LazySpark
from stategate.launcher import free_ports, node_command
from tests import oracle, wire
from tests.live import Socket
from tests.nodes import Nodes, Served, metric, serve
from tests.projects import write_project

OPERATIONS = """
# The operations the clients send (the codegen clients' file has this shape).
query Train($k: Int!) {
  trainStatus(key: $k) { ...Status }
}

query Customers($keys: [String!]!) {
  customerTotalsBatch(keys: $keys) { entries { key record { bookings revenue } } }
}

subscription TrainLive($k: Int!) {
  trainStatus(key: $k) { ...Status }
}

fragment Status on TrainStatusLookup { key record { delay station cancelled } }
"""
# Train as a client may send it: other whitespace, commas, a comment, the fragment first.
TRAIN_REFORMATTED = (
    "fragment Status on TrainStatusLookup{key,record{delay,station,cancelled}}\n"
    "query Train($k:Int!){trainStatus(key:$k){...Status}} # reformatted"
)
TRAIN_FIELDS = "{ key record { delay station cancelled } }"
UNREGISTERED = "query Stations { trainStatus(key: 7) { key record { station } } }"
CACHE_SIZE = 3
JSON = {"accept": "application/json"}
STRICT = {"accept": "application/graphql-response+json"}
TRAINS = (0, 7, -1, 2**31 - 1, 123456)  # some keys present, one absent


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def apq(hash: str) -> dict[str, Any]:
    return {"persistedQuery": {"version": 1, "sha256Hash": hash}}


@pytest.fixture(scope="module")
def apq_cluster(spark: LazySpark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A cluster with an operations file, no allow-list, and a small store of hashes."""
    root = tmp_path_factory.mktemp("apq")
    (root / "ops.graphql").write_text(OPERATIONS)
    settings = f'operations = "ops.graphql"\npersisted_query_cache_size = {CACHE_SIZE}'
    served = serve(root, spark, settings=settings, log="file")  # another reads its log
    yield served
    served.nodes.stop_all()


@pytest.fixture(scope="module")
def allowed(apq_cluster: Served, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The same log and snapshots served by a second cluster whose allow-list is on."""
    root = tmp_path_factory.mktemp("allowed")
    (root / "log").symlink_to(apq_cluster.project.log_dir)  # the oracle's
    (root / "ops.graphql").write_text(OPERATIONS)
    path = write_project(
        root,
        free_ports(3),
        snapshot_url=apq_cluster.project.snapshot_store,
        settings='operations = "ops.graphql"\nallow_list = true',
    )
    nodes = Nodes(projects.load(path), root)
    for node_id in nodes.ids:
        nodes.start(node_id)
    yield Served(root, nodes.project, nodes)
    nodes.stop_all()


@pytest.fixture(scope="module")
def manifest(apq_cluster: Served) -> dict[str, str]:
    """What `stategate operations` prints: the hashes a client ships."""
    command = [sys.executable, "-m", "stategate.cli", "operations"]
    done = subprocess.run(
        [*command, "--config", str(apq_cluster.project.path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    printed: dict[str, str] = json.loads(done.stdout)
    return printed


def post(
    served: Served, node: str, body: dict[str, Any], headers: dict[str, str] = JSON
) -> httpx.Response:
    return served.nodes.client.post(f"{served.nodes.url(node)}/graphql", json=body, headers=headers)


def get(served: Served, node: str, params: dict[str, Any]) -> httpx.Response:
    encoded = {k: v if isinstance(v, str) else json.dumps(v) for k, v in params.items()}
    return served.nodes.client.get(
        f"{served.nodes.url(node)}/graphql", params=encoded, headers=JSON
    )


def code(response: httpx.Response) -> str:
    body = response.json()
    assert "data" not in body, body
    (error,) = body["errors"]
    found: str = error["extensions"]["code"]
    return found


def data(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    body = response.json()
    assert not body.get("errors"), body["errors"]
    return body["data"]


def expected_train(served: Served, key: int) -> dict[str, Any] | None:
    rows = {r[0]: r for part in oracle.expected_store(served.project, "trainStatus").values()
            for r in part}  # fmt: skip
    row = rows.get(key)
    if row is None:
        return None
    record = dict(zip(served.project.stores["trainStatus"].columns, row[1:], strict=True))
    return {"key": key, "record": {k: record[k] for k in ("delay", "station", "cancelled")}}


def check_train(served: Served, answer: Any, key: int) -> None:
    expected = expected_train(served, key)
    got = answer["trainStatus"]
    if expected is None:
        assert got["record"] is None and got["key"] == key
    else:
        assert got == expected


def check_customers(served: Served, answer: Any, keys: list[str]) -> None:
    rows = {r[0]: r for part in oracle.expected_store(served.project, "customerTotals").values()
            for r in part}  # fmt: skip
    columns = list(served.project.stores["customerTotals"].columns)
    for key, entry in zip(keys, answer["customerTotalsBatch"]["entries"], strict=True):
        assert entry["key"] == key
        row = rows.get(key)
        if row is None:
            assert entry["record"] is None
        else:
            record = dict(zip(columns, row[1:], strict=True))
            got = entry["record"]
            assert wire.long(got["bookings"]) == record["bookings"]
            assert got["revenue"] == pytest.approx(record["revenue"])


# --- automatic persisted queries ---------------------------------------------------------


def test_a_hash_is_missed_then_registered_then_enough_over_post(apq_cluster: Served) -> None:
    query = f"query Delay($k: Int!) {{ trainStatus(key: $k) {TRAIN_FIELDS} }}"
    hash, node = sha(query), "node1"
    before = apq_cluster.nodes.metrics(node)
    for headers in (JSON, STRICT):  # 200 either way: the client's cue to send the query
        missed = post(apq_cluster, node, {"extensions": apq(hash), "variables": {"k": 7}}, headers)
        assert missed.status_code == 200 and code(missed) == "PERSISTED_QUERY_NOT_FOUND"
        assert missed.json()["errors"][0]["message"] == "PersistedQueryNotFound"
        assert missed.headers["cache-control"] == "no-store"
    for key in TRAINS:
        sent = {"query": query, "extensions": apq(hash), "variables": {"k": key}}
        check_train(apq_cluster, data(post(apq_cluster, node, sent)), key)
        alone = {"extensions": apq(hash), "variables": {"k": key}, "operationName": "Delay"}
        check_train(apq_cluster, data(post(apq_cluster, node, alone, STRICT)), key)
    # Each node remembers its own: another one misses until the client sends the query there.
    elsewhere = post(apq_cluster, "node2", {"extensions": apq(hash), "variables": {"k": 7}})
    assert code(elsewhere) == "PERSISTED_QUERY_NOT_FOUND"
    after = apq_cluster.nodes.metrics(node)
    requests = "stategate_graphql_requests_total"

    def grew(**labels: str) -> float:
        return metric(after, requests, **labels) - metric(before, requests, **labels)

    assert grew(operation="anonymous", outcome="persisted_query_not_found") == 2
    assert grew(operation="Delay", outcome="ok") == len(TRAINS)  # sent with operationName
    assert grew(operation="anonymous", outcome="ok") == len(TRAINS)


def test_a_hash_is_missed_then_registered_then_enough_over_get(apq_cluster: Served) -> None:
    query = f"query ByGet($k: Int!) {{ trainStatus(key: $k) {TRAIN_FIELDS} }}"
    hash, node = sha(query), "node2"
    missed = get(apq_cluster, node, {"extensions": apq(hash), "variables": {"k": 0}})
    assert missed.status_code == 200 and code(missed) == "PERSISTED_QUERY_NOT_FOUND"
    sent = {"query": query, "extensions": apq(hash), "variables": {"k": 0}}
    check_train(apq_cluster, data(get(apq_cluster, node, sent)), 0)
    for key in TRAINS:
        alone = get(apq_cluster, node, {"extensions": apq(hash), "variables": {"k": key}})
        check_train(apq_cluster, data(alone), key)
    by_id = get(apq_cluster, node, {"documentId": f"sha256:{hash}", "variables": {"k": -1}})
    check_train(apq_cluster, data(by_id), -1)


def test_a_hash_that_is_not_the_querys_is_refused_and_not_kept(apq_cluster: Served) -> None:
    query = "query Wrong { trainStatus(key: 7) { key } }"
    other = sha(query + " ")
    for response in (
        post(apq_cluster, "node1", {"query": query, "extensions": apq(other)}),
        get(apq_cluster, "node1", {"query": query, "extensions": apq(other)}),
    ):
        assert response.status_code == 400 and code(response) == "PERSISTED_QUERY_HASH_MISMATCH"
    missed = post(apq_cluster, "node1", {"extensions": apq(other)})
    assert code(missed) == "PERSISTED_QUERY_NOT_FOUND"


def test_a_node_remembers_a_bounded_number_of_documents(apq_cluster: Served) -> None:
    node = "node3"
    texts = [f"query Bound{i} {{ trainStatus(key: {i}) {{ key }} }}" for i in range(CACHE_SIZE + 1)]
    for text in texts:
        assert data(post(apq_cluster, node, {"query": text, "extensions": apq(sha(text))}))
    for i, text in reversed(list(enumerate(texts[1:], start=1))):  # the newest are kept
        alone = data(post(apq_cluster, node, {"extensions": apq(sha(text))}))
        assert alone == {"trainStatus": {"key": i}}
    evicted = post(apq_cluster, node, {"extensions": apq(sha(texts[0]))})
    assert code(evicted) == "PERSISTED_QUERY_NOT_FOUND"


def test_a_query_sent_by_hash_over_websocket(apq_cluster: Served) -> None:
    query = f"subscription Live($k: Int!) {{ trainStatus(key: $k) {TRAIN_FIELDS} }}"
    hash = sha(query)
    socket = Socket(apq_cluster.nodes.url("node1"))
    try:
        payload = {"extensions": apq(hash), "variables": {"k": 7}}
        socket.send({"id": "a", "type": "subscribe", "payload": payload})
        error = socket.receive()
        assert error["type"] == "error" and error["id"] == "a"
        assert error["payload"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_FOUND"
        socket.send({"id": "b", "type": "subscribe", "payload": {**payload, "query": query}})
        check_train(apq_cluster, socket.next_of("b")["data"], 7)
        socket.send({"id": "c", "type": "subscribe", "payload": payload})
        check_train(apq_cluster, socket.next_of("c")["data"], 7)
        mismatch = {**payload, "query": query + " "}
        socket.send({"id": "d", "type": "subscribe", "payload": mismatch})
        refused = [m for m in socket.drain(1.0) if m.get("id") == "d"]
        assert refused[0]["type"] == "error"
        assert refused[0]["payload"][0]["extensions"]["code"] == "PERSISTED_QUERY_HASH_MISMATCH"
    finally:
        socket.close()


def test_registered_operations_run_by_hash_and_others_run_too(
    apq_cluster: Served, manifest: dict[str, str]
) -> None:
    assert sorted(manifest) == ["Customers", "Train", "TrainLive"]
    for node in apq_cluster.nodes.ids:  # registered: known to every node from the start
        for key in TRAINS:
            sent = {"extensions": apq(manifest["Train"]), "variables": {"k": key}}
            check_train(apq_cluster, data(post(apq_cluster, node, sent)), key)
    station = data(post(apq_cluster, "node1", {"query": UNREGISTERED}))["trainStatus"]
    expected = expected_train(apq_cluster, 7)
    assert expected is not None and station["record"]["station"] == expected["record"]["station"]


# --- the allow-list ----------------------------------------------------------------------


def test_the_allow_list_refuses_an_unregistered_document(allowed: Served) -> None:
    before = allowed.nodes.metrics("node1")
    for headers, status in ((JSON, 200), (STRICT, 403)):
        refused = post(allowed, "node1", {"query": UNREGISTERED}, headers)
        assert refused.status_code == status and code(refused) == "OPERATION_NOT_ALLOWED"
    introspection = post(allowed, "node1", {"query": "{ __schema { queryType { name } } }"})
    assert code(introspection) == "OPERATION_NOT_ALLOWED"
    invalid = post(allowed, "node1", {"query": "{ nope"})  # refused before it is even parsed
    assert code(invalid) == "OPERATION_NOT_ALLOWED"
    # Its hash is not remembered either: no hash names an unregistered document.
    hashed = {"query": UNREGISTERED, "extensions": apq(sha(UNREGISTERED))}
    assert code(post(allowed, "node1", hashed)) == "OPERATION_NOT_ALLOWED"
    alone = post(allowed, "node1", {"extensions": apq(sha(UNREGISTERED))})
    assert code(alone) == "PERSISTED_QUERY_NOT_FOUND"
    after = allowed.nodes.metrics("node1")
    requests = "stategate_graphql_requests_total"
    grew = metric(after, requests, operation="Stations", outcome="not_allowed") - metric(
        before, requests, operation="Stations", outcome="not_allowed"
    )
    assert grew == 0  # no operationName was sent: counted as anonymous
    anonymous = metric(after, requests, operation="anonymous", outcome="not_allowed") - metric(
        before, requests, operation="anonymous", outcome="not_allowed"
    )
    assert anonymous == 5


def test_the_allow_list_runs_a_registered_operation_by_hash_and_by_text(
    allowed: Served, manifest: dict[str, str]
) -> None:
    customers = ["C000001", "Zoë", "nobody", ""]
    for node in allowed.nodes.ids:
        for key in TRAINS:
            variables = {"k": key}
            by_hash = {"extensions": apq(manifest["Train"]), "variables": variables}
            check_train(allowed, data(post(allowed, node, by_hash)), key)
            by_get = get(allowed, node, by_hash)
            check_train(allowed, data(by_get), key)
            by_text = {"query": TRAIN_REFORMATTED, "variables": variables}
            check_train(allowed, data(post(allowed, node, by_text)), key)
            whole_file = {"query": OPERATIONS, "operationName": "Train", "variables": variables}
            check_train(allowed, data(post(allowed, node, whole_file)), key)
        sent = {"extensions": apq(manifest["Customers"]), "variables": {"keys": customers}}
        check_customers(allowed, data(post(allowed, node, sent)), customers)


def test_an_apq_client_under_the_allow_list(allowed: Served) -> None:
    """Apollo Client hashes the text it sends: a miss, then the text with that hash, then
    the hash alone, which now names the registered operation."""
    mine = sha(TRAIN_REFORMATTED)
    missed = post(allowed, "node2", {"extensions": apq(mine), "variables": {"k": 7}})
    assert code(missed) == "PERSISTED_QUERY_NOT_FOUND"
    sent = {"query": TRAIN_REFORMATTED, "extensions": apq(mine), "variables": {"k": 7}}
    check_train(allowed, data(post(allowed, "node2", sent)), 7)
    alone = {"extensions": apq(mine), "variables": {"k": 0}}
    check_train(allowed, data(post(allowed, "node2", alone)), 0)


def test_the_allow_list_holds_over_websocket(allowed: Served, manifest: dict[str, str]) -> None:
    socket = Socket(allowed.nodes.url("node3"))
    try:
        socket.subscribe("no", "subscription { trainStatus(key: 7) { key } }")
        refused = socket.receive()
        assert refused["type"] == "error"
        assert refused["payload"][0]["extensions"]["code"] == "OPERATION_NOT_ALLOWED"
        payload = {"extensions": apq(manifest["TrainLive"]), "variables": {"k": 7}}
        socket.send({"id": "yes", "type": "subscribe", "payload": payload})
        first = socket.next_of("yes")
        check_train(allowed, first["data"], 7)
        assert first["extensions"]["revision"] == 1
    finally:
        socket.close()


# --- a bad operations file ---------------------------------------------------------------


def test_a_bad_operations_file_stops_the_node_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "ops.graphql").write_text(OPERATIONS.replace("bookings revenue", "bookings nope"))
    path = write_project(tmp_path, free_ports(3), settings='operations = "ops.graphql"')
    project = projects.load(path)
    done = subprocess.run(
        node_command(project, "node1"), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert str(tmp_path / "ops.graphql") in lines[0] and "operation 'Customers'" in lines[0]
    assert "Cannot query field 'nope'" in lines[0]
    listed = subprocess.run(
        [sys.executable, "-m", "stategate.cli", "operations", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 2 and listed.stderr.strip() == lines[0]
