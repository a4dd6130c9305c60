"""OpenTelemetry traces across the hop: a 3-node cluster exporting over OTLP/HTTP (the SDK's
exporter, configured by the standard OTEL_* variables) to a receiver in this process that
decodes the protobuf requests a collector would. A client's `traceparent` is the parent of
the node's request span; the round, the internal call, the peer's internal query and its
partition read follow in one trace, each read with its partition, node, replica and
position. The pipeline (`stategate pipeline`, exporting too) traces each publication; each
replica's install is its child, and a read links to the publication it read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest

from contracts import tracing
from contracts.eventlog import Record
from contracts.partitioner import partition_for
from spark_pipeline.spark import LazySpark
from tests import oracle
from tests.jaeger import Jaeger
from tests.nodes import Served, serve
from tests.otlp import EXPORTED_S, Receiver, Span
from tests.projects import START_MS, append

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
QUERY = "query($k: String!) { customerTotals(key: $k) { record { bookings } } }"


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def collector(receiver: Receiver, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jaeger]:
    """A real collector between the exporters and the receiver."""
    jaeger = Jaeger(tmp_path_factory.mktemp("jaeger"), receiver.endpoint)
    jaeger.start()
    yield jaeger
    jaeger.stop()


@pytest.fixture(scope="module")
def cluster(
    spark: LazySpark, tmp_path_factory: pytest.TempPathFactory, collector: Jaeger
) -> Iterator[Served]:
    served = serve(tmp_path_factory.mktemp("tracing"), spark, seed=4, start=False)
    variables = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    with mock.patch.dict(os.environ, variables):  # the nodes' environment
        for node_id in served.nodes.ids:
            served.nodes.start(node_id)
    yield served
    served.nodes.stop_all()


def _key(served: Served, on_node1: bool) -> tuple[str, int]:
    """A key and its partition that node1 hosts (or does not)."""
    project = served.project
    hosted = {p for p, nodes in project.cluster.replica_map.items() if "node1" in nodes}
    for rows in oracle.expected_store(project, "customerTotals").values():
        for row in rows:
            partition = partition_for(row[0], "string", project.cluster.partitions)
            if (partition in hosted) == on_node1:
                return row[0], partition
    raise AssertionError("no such key")


def _ask(served: Served, key: str, trace: str) -> dict[str, Any]:
    headers = {"traceparent": f"00-{trace}-{CLIENT_SPAN}-01"}
    reply = served.nodes.client.post(
        f"{served.nodes.url('node1')}/graphql",
        json={"query": QUERY, "variables": {"k": key}},
        headers=headers,
    )
    answer: dict[str, Any] = reply.json()
    assert "errors" not in answer, answer
    return answer


def test_one_trace_follows_a_lookup_through_the_hop_to_the_peers_read(
    cluster: Served, receiver: Receiver
) -> None:
    key, partition = _key(cluster, on_node1=False)
    _ask(cluster, key, TRACE)
    names = {"graphql request", "routing round", "internal call", "internal query",
             "partition read"}  # fmt: skip
    spans = {s.name: s for s in receiver.of(TRACE, names)}
    request, round_ = spans["graphql request"], spans["routing round"]
    call, query, read = spans["internal call"], spans["internal query"], spans["partition read"]
    assert request.parent == CLIENT_SPAN and request.node == "node1"
    assert round_.parent == request.id and call.parent == round_.id and call.node == "node1"
    peer = call.attributes["stategate.peer"]
    assert query.parent == call.id and query.node == peer  # carried across the hop
    assert read.parent == query.id and read.node == peer
    assert read.attributes["stategate.partition"] == partition
    assert read.attributes["stategate.node"] == peer
    assert read.attributes["stategate.replica"] in ("active", "standby")
    position = json.loads(read.attributes["stategate.position"])  # every topic of its chain
    assert position[cluster.project.stores["customerTotals"].topic.name] > 0


def test_a_key_read_here_is_one_read_under_the_request(cluster: Served, receiver: Receiver) -> None:
    trace = "5bf92f3577b34da6a3ce929d0e0e4737"
    key, partition = _key(cluster, on_node1=True)
    _ask(cluster, key, trace)
    spans = {s.name: s for s in receiver.of(trace, {"graphql request", "partition read"})}
    read = spans["partition read"]
    assert read.parent == spans["graphql request"].id and read.node == "node1"
    assert read.attributes["stategate.partition"] == partition


def test_a_publication_is_the_parent_of_each_install_and_reads_link_to_it(
    cluster: Served, receiver: Receiver, collector: Jaeger
) -> None:
    project = cluster.project
    key, partition = _key(cluster, on_node1=False)
    append(project, "bookings", [Record(key, {"trip": "A→B", "price": 12.5, "seats": 2},
                                        START_MS + 86_400_000)])  # fmt: skip
    variables = {**os.environ, "OTEL_TRACES_EXPORTER": "otlp",
                 "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint}  # fmt: skip
    command = [sys.executable, "-m", "stategate.cli", "pipeline", "--config", str(project.path)]
    subprocess.run(command, env=variables, check=True, capture_output=True, timeout=300)

    def published(spans: list[Span]) -> list[Span]:
        return [s for s in spans if s.name == "publish" and s.node == "pipeline"
                and s.attributes["stategate.partition"] == partition]  # fmt: skip

    (publication,) = receiver.where(published)
    store = project.stores["customerTotals"]
    assert json.loads(publication.attributes["stategate.position"])[store.topic.name] > 0
    replicas = set(project.cluster.replica_map[partition])
    installs = receiver.where(
        lambda spans: (
            [s for s in spans if s.name == "install" and s.parent == publication.id]
            if replicas <= {s.node for s in spans if s.parent == publication.id}
            else []
        )
    )
    assert {s.trace for s in installs} == {publication.trace}
    version = publication.attributes["stategate.version"]
    assert all(s.attributes["stategate.version"] == version for s in installs)
    trace = "8bf92f3577b34da6a3ce929d0e0e4739"
    _ask(cluster, key, trace)
    spans = {s.name: s for s in receiver.of(trace, {"partition read"})}
    read = spans["partition read"]
    assert read.attributes["stategate.version"] == version
    assert read.links == (publication.id,)


def test_the_collector_keeps_the_whole_trace_for_its_query_api(
    cluster: Served, receiver: Receiver, collector: Jaeger
) -> None:
    """Jaeger's own view of a trace: the same spans, parented as sent, each node its own."""
    trace = "9bf92f3577b34da6a3ce929d0e0e4740"
    key, _ = _key(cluster, on_node1=False)
    _ask(cluster, key, trace)
    names = {"graphql request", "routing round", "internal call", "internal query",
             "partition read"}  # fmt: skip
    sent = {s.id: s for s in receiver.of(trace, names)}
    deadline = time.monotonic() + EXPORTED_S
    while {s["spanID"] for s in collector.trace(trace)} != set(sent):
        assert time.monotonic() < deadline, (collector.trace(trace), sent)
        time.sleep(0.2)
    for span in collector.trace(trace):
        mine = sent[str(span["spanID"])]
        assert span["operationName"] == mine.name and span["instance"] == mine.node
        parents = [r["spanID"] for r in span["references"] if r["refType"] == "CHILD_OF"]
        assert parents == [mine.parent] or mine.parent == CLIENT_SPAN


def test_sampled_out_a_request_has_no_spans_under_it(cluster: Served, receiver: Receiver) -> None:
    trace = "6bf92f3577b34da6a3ce929d0e0e4738"
    key, _ = _key(cluster, on_node1=False)
    headers = {"traceparent": f"00-{trace}-{CLIENT_SPAN}-00"}  # the client's: not sampled
    reply = cluster.nodes.client.post(
        f"{cluster.nodes.url('node1')}/graphql",
        json={"query": QUERY, "variables": {"k": key}},
        headers=headers,
    )
    assert "errors" not in reply.json()
    _ask(cluster, key, TRACE.replace("4b", "7b"))  # a sampled one after it, exported after it
    receiver.of(TRACE.replace("4b", "7b"), {"partition read"})
    assert not [s for s in receiver.spans if s.trace == trace]


def test_off_a_span_is_nothing_at_all() -> None:
    assert not tracing.on()
    assert tracing.span("x", {"a": 1}) is tracing.span("y", {})  # one shared nullcontext
    assert tracing.extracted({"traceparent": f"00-{TRACE}-{CLIENT_SPAN}-01"}) is None
