"""The request tally's exposition against prometheus_client's own Counter and Histogram fed
the same requests: the same samples, bucket by bucket."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.cluster.metrics import LATENCY_BUCKETS, NodeMetrics

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: bytes, names: tuple[str, ...]) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
        if s.name.startswith(names) and not s.name.endswith("_created")
    }


def test_the_tally_exposes_what_prometheus_clients_metrics_would() -> None:
    registry = CollectorRegistry()
    requests = Counter(
        "stategate_graphql_requests", "", ["operation", "outcome"], registry=registry
    )
    latency = Histogram(
        "stategate_graphql_request_seconds",
        "",
        ["operation"],
        buckets=LATENCY_BUCKETS,
        registry=registry,
    )
    at_once = Counter("stategate_graphql_read_at_once", "", registry=registry)
    routed = Counter("stategate_graphql_read_routed", "", registry=registry)
    metrics = NodeMetrics()
    chosen = random.Random(52)
    edges = [*LATENCY_BUCKETS, 0.0, 11.0]  # on a bound counts in its bucket
    for number in range(2_000):
        name = chosen.choice([None, "lookup", "page", "totals"])
        outcome = chosen.choice(["ok", "partial", "error", "cancelled"])
        seconds = edges[number] if number < len(edges) else chosen.expovariate(50)
        operation = name or "anonymous"
        requests.labels(operation, outcome).inc()
        latency.labels(operation).observe(seconds)
        way = chosen.randrange(3)
        if way == 1 and outcome == "ok":
            metrics.read_at_once(name, seconds)
            at_once.inc()
        elif way == 2:
            metrics.read_routed(name, outcome, seconds)
            routed.inc()
        else:
            metrics.request(name, outcome, seconds)
    names = ("stategate_graphql_re",)
    want = samples(generate_latest(registry), names)
    got = samples(metrics.exposition(), names)
    assert got.keys() == want.keys()
    for sample, value in want.items():
        assert abs(got[sample] - value) < 1e-9, sample
