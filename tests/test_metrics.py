"""/metrics scraped from a running node: GraphQL requests by operation and outcome with their
latency, internal calls per peer, each hosted partition's snapshot version, age and lag as
the node's own status gives them, what it believes of its peers, and its subscriptions."""

from __future__ import annotations

import time

from tests.live import Socket
from tests.nodes import Served, metric


def test_a_node_exposes_its_requests_calls_snapshots_peers_and_subscriptions(
    served: Served,
) -> None:
    nodes, node_id = served.nodes, served.nodes.ids[0]
    url = nodes.url(node_id)
    before = nodes.metrics(node_id)
    totals = "query Totals { customerTotalsRange(first: 1000) { records { key } } }"
    response = nodes.client.post(
        f"{url}/graphql", json={"query": totals, "operationName": "Totals"}
    )
    assert not response.json().get("errors")
    nodes.gql(node_id, "{ nope }")  # does not validate: no data
    nodes.client.post(
        f"{url}/graphql", content=b"{not json", headers={"content-type": "application/json"}
    )
    socket = Socket(url)
    socket.subscribe("s", "subscription { stores { name } }")
    socket.next_of("s")
    socket.subscribe("t", "subscription { trainStatus(key: 7) { meta { partial } } }")
    socket.next_of("t")
    after = nodes.metrics(node_id)

    def grew(name: str, **labels: str) -> float:
        return metric(after, name, **labels) - metric(before, name, **labels)

    requests = "stategate_graphql_requests_total"
    # Labelled by its name, or "other" once the shared node has counted 200 other names.
    labels = ("Totals", "other")
    assert sum(grew(requests, operation=label, outcome="ok") for label in labels) == 1
    # Neither ran: a document that does not validate, a body that is not JSON.
    assert grew(requests, operation="anonymous", outcome="refused") == 2
    latencies = "stategate_graphql_request_seconds_count"
    assert sum(grew(latencies, operation=label) for label in labels) == 1
    # A scan of every partition asks the active replica of each partition node1 lacks.
    cluster = served.project.cluster
    hosted = set(cluster.hosted_by(node_id))
    asked = {cluster.replica_map[p][0] for p in range(cluster.partitions) if p not in hosted}
    calls = {p: grew("stategate_internal_calls_total", peer=p, outcome="ok") for p in asked}
    assert calls == dict.fromkeys(asked, 1)
    peers = [n for n in nodes.ids if n != node_id]
    deadline = time.monotonic() + 5  # a peer started after node1 is seen at its next poll
    while metric(after, "stategate_peer_up", peer=peers[-1]) != 1 and time.monotonic() < deadline:
        time.sleep(0.2)
        after = nodes.metrics(node_id)
    assert {p: metric(after, "stategate_peer_up", peer=p) for p in peers} == dict.fromkeys(peers, 1)

    status = nodes.status(node_id)["partitions"]
    versions = {p: metric(after, "stategate_snapshot_version", partition=p) for p in status}
    assert versions == {p: s["version"] for p, s in status.items()}
    assert all(metric(after, "stategate_snapshot_age_seconds", partition=p) > 0 for p in status)
    assert all(metric(after, "stategate_snapshot_lag", partition=p) == 0 for p in status)
    assert metric(after, "stategate_subscriptions") == 2
    assert metric(after, "stategate_subscription_cohorts") == 2
    reading = "stategate_subscriptions_reading"
    assert metric(after, reading, store="trainStatus") == 1  # the other reads no store
    assert {labels for name, labels in after if name == reading} == {(("store", "trainStatus"),)}
    socket.close()
