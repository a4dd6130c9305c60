"""Freshness: records counted by append time, coarsened without losing any, counted into the
histogram by their delay, and carried by the manifest (an older manifest reads as unknown)."""

from __future__ import annotations

import orjson
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from contracts.freshness import (
    DELAY_BUCKETS,
    MAX_APPEND_TIMES,
    Delays,
    coarsened,
    counted,
    newest,
)
from contracts.manifest import FRESH_LAYERS, Layer, Manifest, PartitionEntry

times = st.lists(st.one_of(st.none(), st.integers(0, 2**41)), max_size=400)


@settings(deadline=None)
@given(times)
def test_counting_keeps_every_stamped_record_within_the_limit(stamps: list[int | None]) -> None:
    pairs = counted(pa.array(stamps, pa.int64()))
    known = [s for s in stamps if s is not None]
    assert sum(n for _, n in pairs) == len(known)
    assert len(pairs) <= MAX_APPEND_TIMES
    assert [ms for ms, _ in pairs] == sorted({ms for ms, _ in pairs})
    if known:
        # coarsening rounds down, by less than the step it needed
        assert pairs[0][0] <= min(known)
        assert pairs[-1][0] <= max(known)
        step = 1 << max(0, (max(known) - min(known)).bit_length())
        assert max(known) - pairs[-1][0] < step
    if len(set(known)) <= MAX_APPEND_TIMES:
        assert dict(pairs) == {ms: known.count(ms) for ms in set(known)}


def test_coarsening_halves_until_the_pairs_fit() -> None:
    pairs = tuple((ms, 1) for ms in range(0, 10))
    assert coarsened(pairs, limit=5) == ((0, 2), (2, 2), (4, 2), (6, 2), (8, 2))
    assert coarsened(pairs, limit=10) == pairs


def test_the_newest_append_time_is_the_layers_or_else_the_states_below() -> None:
    assert newest(((5, 1), (9, 2)), 3) == 9
    assert newest((), 3) == 3
    assert newest((), None) is None


def histogram(delays: Delays) -> dict[tuple[str, str], float]:
    """(sample, stage) -> value, a sample being "count", "sum" or "bucket:<le>"."""
    registry = CollectorRegistry()
    registry.register(delays)
    found = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            kind = sample.name.rsplit("_", 1)[-1]
            if kind == "bucket":
                kind += ":" + sample.labels["le"]
            found[(kind, sample.labels["stage"])] = sample.value
    return found


def test_records_are_counted_by_their_delay_to_each_stage() -> None:
    delays = Delays()
    # 3 records appended at 1000 ms and 1 at 1900 ms reach "installed" at 2000 ms:
    # delays of 1.0 s (x3) and 0.1 s
    delays.observe_all(((1000, 3), (1900, 1)), {"installed": 2000, "read": None})
    found = histogram(delays)
    assert found[("count", "installed")] == 4
    assert found[("sum", "installed")] == 3.1
    assert found[("bucket:0.1", "installed")] == 1  # le: the bound itself counts
    assert found[("bucket:0.75", "installed")] == 1
    assert found[("bucket:1.0", "installed")] == 4
    assert found[("bucket:+Inf", "installed")] == 4
    assert found[("count", "read")] == 0  # a stage whose time is unknown counts nothing
    assert (
        len([k for k in found if k[1] == "installed" and k[0].startswith("bucket")])
        == len(DELAY_BUCKETS) + 1
    )


def test_a_delay_is_never_negative_across_clocks() -> None:
    delays = Delays()
    delays.observe("written", ((5000, 2),), 4000)  # a writer whose clock runs behind
    found = histogram(delays)
    assert found[("bucket:0.05", "written")] == 2
    assert found[("sum", "written")] == 0


def test_the_manifest_carries_freshness_and_reads_an_older_one_as_unknown() -> None:
    layer = Layer(
        3, "base", "p0/v3.base.duckdb", "ab", 10, {"t": 7}, 100, ((90, 4),), 95, 98, 102, 101
    )
    manifest = Manifest({0: PartitionEntry((layer,))}, {"t": {0: 7}}, "d", 101)
    assert Manifest.from_json(manifest.to_json()) == manifest
    assert layer.stages() == {"read": 98, "written": 101, "published": 102}
    older = orjson.loads(manifest.to_json())
    for field in ("appended", "newest_append_ms", "read_ms", "written_ms", "published_ms"):
        del older["partitions"]["0"]["layers"][0][field]
    read = Manifest.from_json(orjson.dumps(older)).partitions[0].top
    assert (
        read.appended,
        read.newest_append_ms,
        read.read_ms,
        read.written_ms,
        read.published_ms,
    ) == ((), None, None, None, None)


def test_the_manifest_keeps_append_times_for_a_chains_newest_layers_only() -> None:
    def layer(version: int) -> Layer:
        kind = "base" if version == 1 else "delta"
        return Layer(version, kind, f"p0/v{version}", "ab", 1, {}, 0, ((version, 1),), version)

    chain = PartitionEntry(tuple(layer(v) for v in range(1, 8)))
    stored = orjson.loads(Manifest({0: chain}).to_json())["partitions"]["0"]["layers"]
    kept = [x["version"] for x in stored if x["appended"]]
    assert kept == list(range(8 - FRESH_LAYERS, 8))
    # what a compaction compares its chain with: the same layers, whatever they keep
    assert Manifest.from_json(Manifest({0: chain}).to_json()).partitions[0] == chain


def test_a_traced_layer_keeps_its_publications_traceparent_and_an_untraced_one_writes_none() -> (
    None
):
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    traced = Layer(1, "base", "p0/v1", "ab", 1, {}, 0, traceparent=parent)
    stored = orjson.loads(Manifest({0: PartitionEntry((traced,))}).to_json())
    assert stored["partitions"]["0"]["layers"][0]["traceparent"] == parent
    assert Manifest.from_json(orjson.dumps(stored)).partitions[0].top.traceparent == parent
    plain = orjson.loads(
        Manifest({0: PartitionEntry((Layer(1, "base", "p0/v1", "ab", 1, {}, 0),))}).to_json()
    )
    assert "traceparent" not in plain["partitions"]["0"]["layers"][0]
    stored["partitions"]["0"]["layers"][0]["traceparent"] = "x" * 500  # not one: ignored
    assert Manifest.from_json(orjson.dumps(stored)).partitions[0].top.traceparent is None
