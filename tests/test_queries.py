"""Every query kind, from every node, against the oracle computed from the raw log."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from contracts.partitioner import partition_for
from contracts.positions import decode_token
from contracts.project import Project, Store
from contracts.release import release
from resolvers.schema.build import build_schema
from stategate.app import schema_version
from tests import oracle, wire
from tests.wire import as_row, iso, selection

NODES = ["node1", "node2", "node3"]
KEYED = ["latestBooking", "customerTotals", "trainStatus", "trainDelays"]
WINDOWED = ["hourlyRevenue", "delaysHopping"]
META = (
    "meta { partial partitionsAsked partitionsAnswered partitionsFailed consistencyToken "
    "position { topic partition offset } "
    "partitions { partition node role version failure position { topic offset } } }"
)


_CACHE: dict[tuple[str, str], Any] = {}


def expected_store(project: Project, name: str) -> dict[int, list[tuple]]:
    """The oracle, computed once per project and store (the served cluster never changes)."""
    key = (str(project.path), name)
    if key not in _CACHE:
        _CACHE[key] = oracle.expected_store(project, name)
    return _CACHE[key]


def expected_positions(project: Project) -> dict[int, dict[str, int]]:
    key = (str(project.path), "")
    if key not in _CACHE:
        _CACHE[key] = oracle.expected_positions(project)
    return _CACHE[key]


def all_rows(served, name: str) -> list[tuple]:
    rows = [r for part in expected_store(served.project, name).values() for r in part]
    return sorted(
        rows, key=lambda r: r[:2] if served.project.stores[name].kind == "window" else r[:1]
    )


def literal(key: Any) -> str:
    return f'"{key}"' if isinstance(key, str) else str(key)


def assert_rows_equal(got: list[tuple], expected: list[tuple]) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g == pytest.approx(e), (g, e)


def check_meta(served, meta: dict[str, Any], partitions: list[int]) -> None:
    cluster = served.project.cluster
    positions = expected_positions(served.project)
    assert not meta["partial"] and meta["partitionsFailed"] == 0
    assert meta["partitionsAsked"] == meta["partitionsAnswered"] == len(partitions)
    assert sorted(p["partition"] for p in meta["partitions"]) == sorted(partitions)
    for part in meta["partitions"]:
        p = part["partition"]
        assert part["node"] in cluster.replica_map[p]
        expected_role = "ACTIVE" if cluster.replica_map[p][0] == part["node"] else "STANDBY"
        assert part["role"] == expected_role
        assert part["version"] >= 1 and part["failure"] is None
        assert wire.offsets(part["position"]) == positions[p]
    merged = {(o["topic"], o["partition"]): wire.long(o["offset"]) for o in meta["position"]}
    assert merged == {(t, p): o for p in partitions for t, o in positions[p].items()}
    assert decode_token(meta["consistencyToken"]) == merged


@pytest.mark.parametrize("node", NODES)
def test_batch_lookup_of_every_key_is_aligned_with_the_input(served, node: str) -> None:
    for name in KEYED:
        store = served.project.stores[name]
        expected = {r[0]: r for r in all_rows(served, name)}
        missing = ["no-such-key", "C999999"] if store.key_type == "string" else [10**6, -(10**6)]
        keys = [*missing[:1], *expected, *missing[1:]]
        query = (
            f"query($keys: [{'String' if store.key_type == 'string' else 'Int'}!]!) {{ "
            f"{name}Batch(keys: $keys) {{ entries {{ key partition failure record "
            f"{{ {selection(store)} }} }} {META} }} }}"
        )
        result = served.nodes.data(node, query, {"keys": keys})[f"{name}Batch"]
        assert [e["key"] for e in result["entries"]] == keys
        for entry in result["entries"]:
            assert entry["failure"] is None
            assert entry["partition"] == partition_for(entry["key"], store.key_type, 9)
            if entry["key"] in expected:
                assert as_row(store, entry["record"]) == pytest.approx(expected[entry["key"]])
            else:
                assert entry["record"] is None
        check_meta(served, result["meta"], sorted({e["partition"] for e in result["entries"]}))


@pytest.mark.parametrize("node", NODES)
def test_point_lookups_in_one_request(served, node: str) -> None:
    parts, checks = [], []
    for name in KEYED:
        store = served.project.stores[name]
        rows = all_rows(served, name)
        sample = [r[0] for r in rows[:: max(1, len(rows) // 12)]]
        sample.append("nobody" if store.key_type == "string" else 123456789)
        for key in sample:
            alias = f"q{len(parts)}"
            parts.append(
                f"{alias}: {name}(key: {literal(key)}) {{ key partition failure record "
                f"{{ {selection(store)} }} {META} }}"
            )
            checks.append((alias, store, key, {r[0]: r for r in rows}.get(key)))
    body = served.nodes.gql(node, "{ " + " ".join(parts) + " }")
    assert not body.get("errors"), body["errors"]
    data = body["data"]
    # Lookups of one store and partition share one sub-query, however many aliases ask.
    (round_,) = body["extensions"]["routing"]["rounds"]
    assert sum(round_.values()) <= len(KEYED) * 9
    for alias, store, key, expected in checks:
        got = data[alias]
        assert got["key"] == key
        assert got["partition"] == partition_for(key, store.key_type, 9)
        assert got["failure"] is None
        if expected is None:
            assert got["record"] is None
        else:
            assert as_row(store, got["record"]) == pytest.approx(expected)
        check_meta(served, got["meta"], [got["partition"]])


def page_through(served, node: str, field: str, args: str, store: Store, first: int) -> list[tuple]:
    rows: list[tuple] = []
    after = None
    pages = 0
    while True:
        cursor = f', after: "{after}"' if after else ""
        query = (
            f"{{ {field}({args}first: {first}{cursor}) {{ records {{ {selection(store)} }} "
            f"pageInfo {{ hasNextPage endCursor }} {META} }} }}"
        )
        page = served.nodes.data(node, query)[field]
        check_meta(served, page["meta"], list(range(9)))
        assert len(page["records"]) <= first
        rows += [as_row(store, r) for r in page["records"]]
        pages += 1
        if not page["pageInfo"]["hasNextPage"]:
            return rows
        assert len(page["records"]) == first
        after = page["pageInfo"]["endCursor"]
        assert pages < 500


@pytest.mark.parametrize("node", NODES)
def test_prefix_scans_paginate_in_global_key_order(served, node: str) -> None:
    for name in ["latestBooking", "customerTotals"]:
        store = served.project.stores[name]
        rows = all_rows(served, name)
        prefixes = sorted({r[0][:2] for r in rows})[:3] + [rows[len(rows) // 2][0][:4], "", "zzz"]
        for prefix in prefixes:
            expected = [r for r in rows if r[0].startswith(prefix)]
            got = page_through(served, node, f"{name}Prefix", f'prefix: "{prefix}", ', store, 7)
            assert_rows_equal(got, expected)


@pytest.mark.parametrize("node", NODES)
def test_range_scans_paginate_in_global_key_order(served, node: str) -> None:
    for name in KEYED:
        store = served.project.stores[name]
        rows = all_rows(served, name)
        low, high = rows[len(rows) // 5][0], rows[len(rows) // 2][0]
        for args, keep in [
            (f"from: {literal(low)}, to: {literal(high)}, ", lambda k: low <= k <= high),  # noqa: B023
            (f"from: {literal(high)}, ", lambda k: k >= high),  # noqa: B023
            (f"to: {literal(low)}, ", lambda k: k <= low),  # noqa: B023
            (f"from: {literal(low)}, to: {literal(low)}, ", lambda k: k == low),  # noqa: B023
        ]:
            expected = [r for r in rows if keep(r[0])]
            got = page_through(served, node, f"{name}Range", args, store, 25)
            assert_rows_equal(got, expected)


@pytest.mark.parametrize("node", NODES)
def test_window_query_of_one_key(served, node: str) -> None:
    for name in WINDOWED:
        store = served.project.stores[name]
        rows = all_rows(served, name)
        by_key: dict[Any, list[tuple]] = {}
        for r in rows:
            by_key.setdefault(r[0], []).append(r)
        keys = sorted(by_key, key=lambda k: -len(by_key[k]))[:5]
        for key in keys:
            starts = [r[1] for r in by_key[key]]
            lo, hi = starts[len(starts) // 4], starts[-1]
            query = (
                f'{{ {name}(key: {literal(key)}, from: "{iso(lo)}", to: "{iso(hi)}") '
                f"{{ key partition windows {{ {selection(store)} }} {META} }} }}"
            )
            got = served.nodes.data(node, query)[name]
            assert got["partition"] == partition_for(key, store.key_type, 9)
            expected = [r for r in by_key[key] if lo <= r[1] <= hi]
            assert_rows_equal([as_row(store, w) for w in got["windows"]], expected)
            check_meta(served, got["meta"], [got["partition"]])


@pytest.mark.parametrize("node", NODES)
def test_windows_of_all_keys_paginate(served, node: str) -> None:
    for name in WINDOWED:
        store = served.project.stores[name]
        rows = all_rows(served, name)
        starts = sorted({r[1] for r in rows})
        lo, hi = starts[len(starts) // 3], starts[2 * len(starts) // 3]
        expected = [r for r in rows if lo <= r[1] <= hi]
        args = f'from: "{iso(lo)}", to: "{iso(hi)}", '
        got = page_through(served, node, f"{name}All", args, store, 97)
        assert_rows_equal(got, expected)


def test_one_internal_request_per_owning_node(served) -> None:
    store = served.project.stores["customerTotals"]
    keys = [r[0] for r in all_rows(served, "customerTotals")]
    assert {partition_for(k, "string", 9) for k in keys} == set(range(9))
    query = """query($keys: [String!]!) {
      a: customerTotalsBatch(keys: $keys) { entries { key } }
      b: latestBookingPrefix(prefix: "C", first: 5) { records { key } }
      c: hourlyRevenueAll(from: "2000-01-01T00:00:00Z", to: "2100-01-01T00:00:00Z", first: 3)
         { records { key } }
      d: trainDelaysRange(first: 4) { records { key } }
      e: customerTotals(key: "C000001") { key }
    }"""
    before = {n: served.nodes.status(n)["internal_requests"] for n in NODES}
    body = served.nodes.gql("node1", query, {"keys": keys})
    assert not body.get("errors"), body
    after = {n: served.nodes.status(n)["internal_requests"] for n in NODES}
    routing = body["extensions"]["routing"]
    assert len(routing["rounds"]) == 1
    remote = set(routing["rounds"][0]) - {"node1"}
    assert routing["internalRequests"] == len(routing["rounds"][0])
    for node in ["node2", "node3"]:
        assert after[node] - before[node] == (1 if node in remote else 0)
    assert remote, "the keys span all partitions: some must live on other nodes"
    assert len(body["data"]["a"]["entries"]) == len(keys) and store.kind == "aggregate"


def test_stores_and_cluster_queries(served) -> None:
    query = (
        "{ stores { name kind keyType windowSizeMs windowAdvanceMs columns { name type } } "
        "cluster { node partitionsCount replicas nodes { id } partitions "
        "{ partition replicas { node role alive version lag "
        "position { topic offset } } } } }"
    )
    deadline = time.monotonic() + 30
    while True:  # node2 has polled its peers (a cluster just started has not yet)
        data = served.nodes.data("node2", query)
        replicas = [r for p in data["cluster"]["partitions"] for r in p["replicas"]]
        if all(r["alive"] and r["lag"] == "0" for r in replicas) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert {s["name"] for s in data["stores"]} == set(served.project.stores)
    for info in data["stores"]:
        store = served.project.stores[info["name"]]
        window = store.kind == "window"
        assert wire.maybe_long(info["windowSizeMs"]) == (store.window_size_ms if window else None)
        advance = store.window_advance_ms if window else None
        assert wire.maybe_long(info["windowAdvanceMs"]) == advance
    cluster = data["cluster"]
    assert cluster["node"] == "node2" and cluster["partitionsCount"] == 9
    positions = expected_positions(served.project)
    for part in cluster["partitions"]:
        replicas = served.project.cluster.replica_map[part["partition"]]
        assert [r["node"] for r in part["replicas"]] == list(replicas)
        assert [r["role"] for r in part["replicas"]] == ["ACTIVE", "STANDBY"]
        for r in part["replicas"]:
            assert r["alive"] and r["lag"] == "0"
            assert wire.offsets(r["position"]) == positions[part["partition"]]
    plain = served.nodes.client.get(f"{served.nodes.url('node3')}/cluster").json()
    assert [p["partition"] for p in plain["partitions"]] == list(range(9))
    for part in plain["partitions"]:  # its Longs as the API writes them: decimal strings
        for r in part["replicas"]:
            assert r["lag"] == "0" and all(isinstance(o, str) for o in r["position"].values())
            assert {t: int(o) for t, o in r["position"].items()} == positions[part["partition"]]
            assert isinstance(r["version"], int)  # an Int in the API


def test_graphiql_in_a_browser(served) -> None:
    response = served.nodes.client.get(
        f"{served.nodes.url('node1')}/graphql", headers={"accept": "text/html"}
    )
    assert response.status_code == 200 and "graphiql" in response.text.lower()


def test_every_node_says_its_release_and_schema_version(served) -> None:
    """What each node runs, as its peers heard it on their status polls: one release (this
    checkout's) and one schema version (the project's schema) all around."""
    schema = schema_version(build_schema(served.project))
    query = "{ cluster { nodes { id release schemaVersion } } }"
    deadline = time.monotonic() + 30
    for node in served.nodes.ids:
        while True:
            nodes = served.nodes.data(node, query)["cluster"]["nodes"]
            said = {n["id"]: (n["release"], n["schemaVersion"]) for n in nodes}
            if all(r is not None for r, _ in said.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert said == {n: (release(), schema) for n in served.nodes.ids}, node
    status = json.loads(served.nodes.cli("cluster", "status"))  # asks each node itself
    assert status["releases"] == {release(): served.nodes.ids}
    assert status["schemas"] == {schema: served.nodes.ids} and not status["mixed"]
    for node in status["nodes"]:
        hosted = served.project.cluster.hosted_by(node["id"])
        assert node["reachable"] and {int(p) for p in node["serving"]} == set(hosted)
        assert all(version >= 1 for version in node["serving"].values())
        assert {int(p) for p in node["global"]} == set(range(served.project.cluster.partitions))
