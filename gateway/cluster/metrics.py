"""A node's Prometheus metrics (prometheus-client), served at /metrics.

Counted as they happen: GraphQL requests by operation and outcome, with their latency;
internal calls by peer and outcome; failovers (a partition's sub-query moving on from a
replica that could not answer it); records by their delay from append to each stage up to
being installed here (contracts/freshness.py). Read at each scrape from the node's own state: each
hosted partition's snapshot version, age and lag, sync errors, what the node believes of
its peers, and its subscriptions.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from contracts.freshness import Delays
from gateway.cluster.status import LiveCounts, NodeStatus

SUBSCRIPTIONS_READING = "stategate_subscriptions_reading"  # by store
MAX_OPERATION_NAMES = 200  # distinct operation labels; later names count as "other"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


@dataclass(frozen=True)
class NodeState:
    """What a scrape reads of the node (gateway/node.py provides it)."""

    status: Callable[[], NodeStatus]
    lag: Callable[[int, dict[str, int]], int | None]
    peers_alive: Callable[[], dict[str, bool]]
    assignment_version: Callable[[], int]
    coordinator_connected: Callable[[], bool]
    fenced: Callable[[], bool]
    global_stores: Callable[[], tuple[int, dict[str, int]]]  # layer bytes, store -> in memory
    histories: Callable[[], dict[str, int]]  # versioned store -> its history's bytes in memory
    late: Callable[[], dict[int, float]]  # chain -> seconds late (storage/delivery/lateness.py)


class NodeMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = RequestTally()
        self.registry.register(self.requests)
        self.internal_calls = Counter(
            "stategate_internal_calls",
            "internal calls this node made, by peer and outcome "
            "(ok, refused, garbage, unreachable)",
            ["peer", "outcome"],
            registry=self.registry,
        )
        self.moves = Counter(
            "stategate_partition_moves",
            "partitions this node took on (received) or handed over, as assignments changed",
            ["direction"],
            registry=self.registry,
        )
        self.warmup = Histogram(
            "stategate_warmup_seconds",
            "from a partition's assignment to this node as a warm-up to serving it",
            buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800),
            registry=self.registry,
        )
        self.failovers = Counter(
            "stategate_failovers",
            "sub-queries that moved on from a replica, by that replica and its failure",
            ["peer", "reason"],
            registry=self.registry,
        )
        self.freshness = Delays()
        self.registry.register(self.freshness)
        self._names: set[str] = set()
        self._calls: dict[tuple[str, str], Any] = {}  # (peer, outcome) -> its counter

    def operation(self, name: str | None) -> str:
        """The label of an operation name: a bounded set, whatever clients send."""
        if not name:
            return "anonymous"
        if name in self._names or len(self._names) < MAX_OPERATION_NAMES:
            self._names.add(name)
            return name
        return "other"

    def request(self, name: str | None, outcome: str, seconds: float) -> None:
        self.requests.add(self.operation(name), outcome, seconds)

    def read_at_once(self, name: str | None, seconds: float) -> None:
        self.request(name, "ok", seconds)
        self.requests.at_once += 1

    def read_routed(self, name: str | None, outcome: str, seconds: float) -> None:
        self.request(name, outcome, seconds)
        self.requests.routed += 1

    def internal_call(self, peer: str, outcome: str) -> None:
        counter = self._calls.get((peer, outcome))
        if counter is None:  # labels() looks a child up slowly: each is kept
            counter = self._calls[peer, outcome] = self.internal_calls.labels(peer, outcome)
        counter.inc()

    def watch(self, state: NodeState, node_wide: bool = True) -> None:
        """Read `state` at each scrape: all of it, or (a follower's, whose keeper reports
        the node's state) only what is this worker's own: its subscriptions and the
        internal requests it served."""
        self.registry.register(_StateCollector(state, node_wide))

    def watch_reading(self, reading: Callable[[], dict[str, int]]) -> None:
        """Read at each scrape: this worker's open subscriptions by the store they read
        (resolvers/transport/live.py: Hub.reading)."""
        self.registry.register(_ReadingCollector(reading))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def summed(expositions: Iterable[str]) -> bytes:
    """Several processes' expositions as one: each sample's values added up (a node-wide
    gauge is in one of them only), `_created` samples left out."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for text in expositions:
        for family in text_string_to_metric_families(text):
            if family.name not in families:
                families[family.name] = Metric(family.name, family.documentation, family.type)
                values[family.name] = {}
            found = values[family.name]
            for sample in family.samples:
                if not sample.name.endswith("_created"):
                    key = (sample.name, tuple(sorted(sample.labels.items())))
                    found[key] = found.get(key, 0.0) + sample.value
    for name, family in families.items():
        for (sample_name, labels), value in values[name].items():
            family.add_sample(sample_name, dict(labels), value)
    registry = CollectorRegistry()
    registry.register(_Collected(list(families.values())))
    return generate_latest(registry)


class RequestTally(Collector):
    """GraphQL requests by operation and outcome, with their latency, and how many of them
    the known reads answered: plain numbers the event loop adds to (every request is counted
    on it), made Prometheus families at each scrape. prometheus_client's Counter and
    Histogram take a lock for each call, a twelfth of a known read's whole cost."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}  # (operation, outcome) -> requests
        self.latencies: dict[str, list[float]] = {}  # operation -> each bucket's count, sum
        self.at_once = 0
        self.routed = 0

    def add(self, operation: str, outcome: str, seconds: float) -> None:
        counted = (operation, outcome)
        self.counts[counted] = self.counts.get(counted, 0) + 1
        latency = self.latencies.get(operation)
        if latency is None:
            latency = self.latencies[operation] = [0.0] * (len(LATENCY_BUCKETS) + 2)
        latency[bisect_left(LATENCY_BUCKETS, seconds)] += 1  # the last bucket: +Inf
        latency[-1] += seconds

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "stategate_graphql_requests",
            "GraphQL requests by operation name and outcome (ok, partial, error, refused, "
            "persisted_query_not_found, not_allowed, cancelled)",
            labels=["operation", "outcome"],
        )
        for (operation, outcome), count in sorted(self.counts.items()):
            requests.add_metric([operation, outcome], count)
        latency = HistogramMetricFamily(
            "stategate_graphql_request_seconds",
            "GraphQL request latency, from the request's arrival to its response",
            labels=["operation"],
        )
        bounds = [*map(floatToGoString, LATENCY_BUCKETS), "+Inf"]
        for operation, observed in sorted(self.latencies.items()):
            buckets = list(zip(bounds, accumulate(observed[:-1]), strict=True))
            latency.add_metric([operation], buckets, observed[-1])
        yield from (requests, latency)
        yield CounterMetricFamily(
            "stategate_graphql_read_at_once",
            "GraphQL requests answered from their bytes on the shortest path: a known "
            "one-key read of this node's memory (resolvers/transport/known.py)",
            value=self.at_once,
        )
        yield CounterMetricFamily(
            "stategate_graphql_read_routed",
            "GraphQL requests answered from their bytes on the short path through the router: "
            "a known one-key read of a key another node serves (resolvers/transport/known.py)",
            value=self.routed,
        )


class _Collected(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


class _ReadingCollector(Collector):
    def __init__(self, reading: Callable[[], dict[str, int]]) -> None:
        self.reading = reading

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            SUBSCRIPTIONS_READING,
            "open subscriptions whose last evaluation read the store (a store removed while "
            "any reads it is refused: stategate apply)",
            labels=["store"],
        )
        for store, count in sorted(self.reading().items()):
            family.add_metric([store], count)
        yield family


class _StateCollector(Collector):
    def __init__(self, state: NodeState, node_wide: bool) -> None:
        self.state = state
        self.node_wide = node_wide

    def collect(self) -> Iterator[Metric]:
        status = self.state.status()
        yield from _live(status.live)
        yield CounterMetricFamily(
            "stategate_internal_requests_served",
            "internal query requests this node answered for its peers",
            value=status.internal_requests,
        )
        if self.node_wide:
            yield from self._node_wide(status)

    def _node_wide(self, status: NodeStatus) -> Iterator[Metric]:
        version = GaugeMetricFamily(
            "stategate_snapshot_version", "the version served, per partition", labels=["partition"]
        )
        age = GaugeMetricFamily(
            "stategate_snapshot_age_seconds",
            "seconds since the pipeline built the snapshot served, per partition",
            labels=["partition"],
        )
        lag = GaugeMetricFamily(
            "stategate_snapshot_lag",
            "log offsets the snapshot served is behind the log end, per partition",
            labels=["partition"],
        )
        late = GaugeMetricFamily(
            "stategate_snapshot_late_seconds",
            "seconds since the pipeline published a version of the partition that this node "
            "does not serve yet (0: it serves the newest), per partition",
            labels=["partition"],
        )
        now = time.time()
        unserved = self.state.late()
        for partition, state in status.partitions.items():
            label = [str(partition)]
            version.add_metric(label, state.version)
            late.add_metric(label, unserved.get(partition, 0.0))
            age.add_metric(label, max(0.0, now - state.created_ms / 1000))
            behind = self.state.lag(partition, state.offsets)
            if behind is not None:
                lag.add_metric(label, behind)
        errors = GaugeMetricFamily(
            "stategate_sync_errors",
            "1 for each partition whose newest version failed to install",
            labels=["partition"],
        )
        for partition in status.sync_errors:
            errors.add_metric([str(partition)], 1)
        up = GaugeMetricFamily(
            "stategate_peer_up", "what this node believes of each peer", labels=["peer"]
        )
        for peer, alive in self.state.peers_alive().items():
            up.add_metric([peer], 1 if alive else 0)
        yield from (version, age, lag, late, errors, up)
        yield GaugeMetricFamily(
            "stategate_assignment_version",
            "the version of the assignment this node routes by (0: the project file's)",
            value=self.state.assignment_version(),
        )
        yield GaugeMetricFamily(
            "stategate_coordinator_connected",
            "1 while the coordinator answers this node (always 1 without one)",
            value=int(self.state.coordinator_connected()),
        )
        yield GaugeMetricFamily(
            "stategate_fenced",
            "1 while this node's coordinator session may have expired: it serves as nobody's "
            "active until it reads the assignment again",
            value=int(self.state.fenced()),
        )
        yield from _global_stores(*self.state.global_stores())
        histories = GaugeMetricFamily(
            "stategate_history_memory_bytes",
            "bytes of a versioned store's history this node keeps in memory (its versions, "
            "indexed), every partition's it holds",
            labels=["store"],
        )
        for store, size in sorted(self.state.histories().items()):
            histories.add_metric([store], size)
        yield histories


def _global_stores(disk: int, memory: dict[str, int]) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "stategate_global_layers_bytes",
        "bytes of the global stores' layer files this node holds (max_global_mb bounds them)",
        value=disk,
    )
    held = GaugeMetricFamily(
        "stategate_global_store_memory_bytes",
        "bytes of a global store's rows this node keeps in memory, every partition's",
        labels=["store"],
    )
    for store, size in sorted(memory.items()):
        held.add_metric([store], size)
    yield held


def _live(live: LiveCounts) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "stategate_subscriptions", "open subscriptions", value=live.subscriptions
    )
    yield GaugeMetricFamily(
        "stategate_subscription_cohorts",
        "distinct subscriptions, each evaluated once per change",
        value=live.cohorts,
    )
    yield CounterMetricFamily(
        "stategate_subscription_evaluations", "cohort evaluations", value=live.evaluations
    )
