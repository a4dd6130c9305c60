"""Sub-queries against a real (in-memory) DuckDB snapshot: every query kind returns what a
plain Python filter over the same rows returns, for awkward string keys and integer keys, on
a base alone and on a base under one or three levels of changed, added and deleted rows."""

from __future__ import annotations

import functools
import random
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest

from contracts import chains
from contracts.errors import Failure
from contracts.project import Project, Store, load
from contracts.snapshot_file import columns as stored_columns
from contracts.topology import Topology
from gateway.model.queries import (
    NOT_HERE,
    Get,
    Prefix,
    Query,
    Range,
    Row,
    SubQuery,
    Windows,
    WindowsOfKey,
)
from gateway.storage import execution
from gateway.storage.catalog.hub import Base
from gateway.storage.catalog.layers import LayeredTable, LayerHeader, Level, LocalLayer, Overlay
from gateway.storage.catalog.snapshots import Snapshot
from gateway.storage.memory.lookup_table import MAX_KEY_BYTES, LookupTable
from gateway.storage.memory.row_select import columns
from gateway.storage.sql import reads
from tests.projects import write_project

MAX = "\U0010ffff"
# Code points that sort awkwardly: the largest one, both sides of the surrogates, LIKE's
# wildcards, quotes, multi-byte UTF-8 of every length.
STRING_ALPHABET = ["a", "b", "Z", "é", "日", "🚆", MAX, "\ud7ff", "\ue000", "%", "_", "'", '"']
WINDOW_MS = 3_600_000
TABLE, AGGREGATE, WINDOW = "latestBooking", "trainDelays", "hourlyRevenue"
INT_WINDOW = "delaysHopping"  # a window store with integer keys, hopping windows


@dataclass
class Fixture:
    project: Project
    cursor: duckdb.DuckDBPyConnection
    snapshot: Snapshot
    rows: dict[str, list[Row]]  # store -> expected rows (as a query returns them), by key

    def run(self, store: str, query: Query) -> list[Row]:
        rows = execution.by_sql(self.cursor, self.snapshot, self.project.stores[store], query)
        assert rows is not NOT_HERE
        return rows


def random_string_key(rng: random.Random) -> str:
    return "".join(rng.choice(STRING_ALPHABET) for _ in range(rng.randrange(0, 5)))


def random_int_key(rng: random.Random) -> int:
    return rng.choice([rng.randrange(-40, 40), rng.randrange(-(2**31), 2**31), 2**31 - 1, -(2**31)])


def maybe(rng: random.Random, value: Any) -> Any:
    return None if rng.random() < 0.15 else value


def stored_row(rng: random.Random, store: Store, key: Any, start: int | None) -> dict[str, Any]:
    """One row of the store's table with random values (and nulls) for each stored column."""
    row: dict[str, Any] = {"key": key}
    if start is not None:
        row["window_start"] = start
    for name, kind in store.stored_columns.items():
        if name.endswith("_n"):  # an average's count: zero sometimes
            row[name] = maybe(rng, rng.randrange(0, 4))
        elif kind == "string":
            row[name] = maybe(rng, random_string_key(rng))
        elif kind == "double":
            row[name] = maybe(rng, rng.choice([rng.uniform(-1e6, 1e6), 0.1, -0.0, 1e300]))
        elif kind == "int":
            row[name] = maybe(rng, rng.randrange(-(2**31), 2**31))
        else:  # long
            row[name] = maybe(rng, rng.randrange(-(2**53), 2**53))
    return row


def expected_row(store: Store, stored: dict[str, Any]) -> Row:
    """What a query returns for a stored row: key, [window start,] then Store.columns, an
    average computed from its sum and count."""
    row: Row = [stored["key"]]
    if store.kind == "window":
        row.append(stored["window_start"])
    if store.kind == "table":
        return row + [stored[name] for name in store.columns]
    for aggregate in store.aggregates:
        if aggregate.func != "avg":
            row.append(stored[aggregate.name])
            continue
        total, count = stored[f"{aggregate.name}_sum"], stored[f"{aggregate.name}_n"]
        row.append(None if total is None or not count else float(total) / count)
    return row


def random_rows(rng: random.Random, store: Store, n: int) -> list[dict[str, Any]]:
    make_key: Callable[[random.Random], Any] = (
        random_string_key if store.key_type == "string" else random_int_key
    )
    seen: set[Any] = set()
    stored: list[dict[str, Any]] = []
    while len(stored) < n:
        key = make_key(rng)
        start = rng.randrange(0, 8) * WINDOW_MS if store.kind == "window" else None
        if (key, start) in seen:
            continue
        seen.add((key, start))
        stored.append(stored_row(rng, store, key, start))
    return stored


def identity(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["key"], row.get("window_start", 0))


def insert(
    cursor: duckdb.DuckDBPyConnection, table: str, typed: dict[str, str], rows: list
) -> None:
    definitions = ", ".join(f'"{column}" {duck_type}' for column, duck_type in typed.items())
    cursor.execute(f"CREATE TABLE {table} ({definitions})")
    rows = sorted(rows, key=identity)  # as the pipeline writes
    if rows:
        one = f"({', '.join('?' for _ in typed)})"
        cursor.execute(
            f"INSERT INTO {table} VALUES {', '.join(one for _ in rows)}",
            [row[name] for row in rows for name in typed],
        )


def fill(
    rng: random.Random, cursor: duckdb.DuckDBPyConnection, store: Store, n: int, levels: int
) -> list[Row]:
    """A base of n random rows in `snap`, and `levels` levels above it as `ov0`, `ov1`...,
    each changing about a third of the rows, deleting a tenth (a table's) and adding new
    ones, the newer over the older. The rows a reader of the chain must see."""
    base = random_rows(rng, store, n)
    insert(cursor, f'snap."{store.name}"', stored_columns(store), base)
    state = {identity(row): row for row in base}
    for level in range(levels):
        rows = list(state.values())
        changes = [
            {**stored_row(rng, store, row["key"], row.get("window_start")), "_deleted": False}
            for row in rng.sample(rows, n // 3)
        ]
        changes += [{**row, "_deleted": False} for row in random_rows(rng, store, n // 5)]
        if store.kind == "table":
            for row in rng.sample(rows, n // 10) + rng.sample(base, n // 20):
                changes.append({**row, "_deleted": True})  # some deleted before, again
        overlay = {identity(row): row for row in changes}  # one row per key, as a level holds
        for key, row in overlay.items():
            if row["_deleted"]:
                state.pop(key, None)
            else:
                state[key] = row
        typed = {**stored_columns(store), "_deleted": "BOOLEAN"}
        insert(cursor, Level(f"ov{level}", {}).relation(store.name), typed, list(overlay.values()))
    return [expected_row(store, state[key]) for key in sorted(state)]


LEVELS = {"base": 0, "one-level": 1, "three-levels": 3}


@pytest.fixture(scope="module", params=list(LEVELS))
def fx(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fixture]:
    project = load(write_project(tmp_path_factory.mktemp("execution"), [1, 2, 3]))
    connection = duckdb.connect(":memory:", config={"threads": 1})
    connection.execute("ATTACH ':memory:' AS snap")
    levels = LEVELS[request.param]
    rng = random.Random(31)
    rows = {
        name: fill(rng, connection, project.stores[name], 260, levels)
        for name in (TABLE, AGGREGATE, WINDOW, INT_WINDOW)
    }
    overlay = None
    if levels:  # a node counts each store's deleted rows when it installs a level
        overlay = Overlay(
            LayerHeader({}, 0),
            tuple(
                Level(f"ov{level}", {}, deleted=deleted_rows(connection, f"ov{level}", rows))
                for level in range(levels)
            ),
        )
    snapshot = snapshot_at({}, overlay=overlay)
    yield Fixture(project, connection.cursor(), snapshot, rows)
    connection.close()


def deleted_rows(
    connection: duckdb.DuckDBPyConnection, alias: str, stores: Iterable[str]
) -> dict[str, int]:
    level = Level(alias, {})
    sql = "SELECT count(*) FROM {} WHERE _deleted"
    return {
        name: connection.execute(sql.format(level.relation(name))).fetchall()[0][0]
        for name in stores
    }


def test_the_fixture_stores_cover_the_kinds_and_key_types_under_test(fx: Fixture) -> None:
    stores = fx.project.stores
    assert (stores[TABLE].kind, stores[TABLE].key_type) == ("table", "string")
    assert (stores[AGGREGATE].kind, stores[AGGREGATE].key_type) == ("aggregate", "int")
    assert stores[WINDOW].kind == "window"
    assert (stores[INT_WINDOW].kind, stores[INT_WINDOW].key_type) == ("window", "int")
    assert any(a.func == "avg" for a in stores[AGGREGATE].aggregates)
    assert any(a.func == "avg" for a in stores[WINDOW].aggregates)
    assert all(len(rows) > 200 for rows in fx.rows.values())
    averages = [row[-1] for row in fx.rows[AGGREGATE]]
    assert None in averages and any(a is not None for a in averages)


def by_key(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: r[0])


def candidate_key(rng: random.Random, fx: Fixture, store: str) -> Any:
    """An existing key most of the time, else one that is probably missing."""
    if rng.random() < 0.7 and fx.rows[store]:
        return rng.choice(fx.rows[store])[0]
    kind = fx.project.stores[store].key_type
    return random_string_key(rng) if kind == "string" else random_int_key(rng)


@pytest.mark.parametrize("store", [TABLE, AGGREGATE])
def test_get_of_one_key_returns_its_row_or_nothing(fx: Fixture, store: str) -> None:
    rng = random.Random(32)
    for _ in range(60):
        key = candidate_key(rng, fx, store)
        assert fx.run(store, Get((key,))) == [r for r in fx.rows[store] if r[0] == key]


@pytest.mark.parametrize("store", [TABLE, AGGREGATE])
def test_get_of_many_keys_returns_the_rows_of_the_keys_present(fx: Fixture, store: str) -> None:
    rng = random.Random(33)
    for _ in range(60):
        keys = tuple(candidate_key(rng, fx, store) for _ in range(rng.randrange(2, 40)))
        expected = [r for r in fx.rows[store] if r[0] in set(keys)]
        assert by_key(fx.run(store, Get(keys))) == by_key(expected)


@pytest.mark.parametrize("store", [TABLE, AGGREGATE])
def test_range_returns_the_first_rows_between_its_bounds_after_the_cursor(
    fx: Fixture, store: str
) -> None:
    rng = random.Random(34)
    memory = in_memory(fx, fx.project.stores[store])
    for _ in range(80):
        low, high, after = (
            None if rng.random() < 0.4 else candidate_key(rng, fx, store) for _ in range(3)
        )
        limit = rng.randrange(1, 40)
        expected = [
            r
            for r in fx.rows[store]
            if (low is None or r[0] >= low)
            and (high is None or r[0] <= high)
            and (after is None or r[0] > after)
        ][:limit]
        assert fx.run(store, Range(low, high, limit, after)) == expected
        assert memory.scan(Range(low, high, limit, after)) == expected
    # bounds numpy's fixed-width bytes would misread, or of the other kind: SQL answers
    awkward = ["a\x00", "\ud800"] if fx.project.stores[store].key_type == "string" else ["7"]
    for bound in awkward:
        assert memory.scan(Range(bound, None, 5)) is NOT_HERE
        assert memory.scan(Range(None, None, 5, bound)) is NOT_HERE


def random_prefix(rng: random.Random, fx: Fixture) -> str:
    key: str = rng.choice(fx.rows[TABLE])[0]
    prefix: str = rng.choice(
        [
            "",
            MAX,
            MAX * 2,
            "\ud7ff",
            "%",
            "_",
            key[: rng.randrange(0, len(key) + 1)],
            key,
            key + MAX,
            key[: rng.randrange(0, len(key) + 1)] + rng.choice(STRING_ALPHABET),
            random_string_key(rng),
        ]
    )
    return prefix


def test_prefix_returns_the_first_keys_starting_with_it_after_the_cursor(fx: Fixture) -> None:
    rng = random.Random(35)
    memory = in_memory(fx, fx.project.stores[TABLE])
    non_empty = 0
    for _ in range(120):
        prefix = random_prefix(rng, fx)
        after = None if rng.random() < 0.5 else candidate_key(rng, fx, TABLE)
        limit = rng.randrange(1, 40)
        expected = [
            r for r in fx.rows[TABLE] if r[0].startswith(prefix) and (after is None or r[0] > after)
        ][:limit]
        assert fx.run(TABLE, Prefix(prefix, limit, after)) == expected, (prefix, after)
        assert memory.scan(Prefix(prefix, limit, after)) == expected, (prefix, after)
        non_empty += bool(expected)
    assert non_empty > 30


def test_prefixes_ending_in_the_largest_code_point_find_their_keys(fx: Fixture) -> None:
    with_max = [r for r in fx.rows[TABLE] if MAX in r[0]]
    assert with_max, "the fixture has keys holding U+10FFFF"
    for row in with_max:
        head = row[0][: row[0].index(MAX) + 1]
        expected = [r for r in fx.rows[TABLE] if r[0].startswith(head)]
        assert fx.run(TABLE, Prefix(head, 1000)) == expected
        assert in_memory(fx, fx.project.stores[TABLE]).scan(Prefix(head, 1000)) == expected
        assert row in expected


def test_prefix_upper_bound_separates_the_keys_with_the_prefix_from_the_others() -> None:
    rng = random.Random(36)
    for _ in range(3000):
        prefix = random_string_key(rng)
        text = prefix[: rng.randrange(0, len(prefix) + 1)] + random_string_key(rng)
        upper = reads.prefix_upper_bound(prefix)
        if upper is None:
            assert prefix.rstrip(MAX) == ""
            continue
        assert (prefix <= text < upper) == text.startswith(prefix), (prefix, text, upper)
        upper.encode()  # never a lone surrogate: DuckDB could not take it as a parameter


@pytest.mark.parametrize("store", [WINDOW, INT_WINDOW])
def test_windows_of_a_key_are_its_windows_within_the_span_by_start(fx: Fixture, store: str) -> None:
    rng = random.Random(37)
    for _ in range(60):
        key = candidate_key(rng, fx, store)
        start = rng.randrange(-1, 9) * WINDOW_MS + rng.choice([0, 0, 1, -1])
        end = start + rng.randrange(0, 5) * WINDOW_MS + rng.choice([0, 0, 1, -1])
        expected = sorted(
            (r for r in fx.rows[store] if r[0] == key and start <= r[1] <= end),
            key=lambda r: r[1],
        )
        assert fx.run(store, WindowsOfKey(key, start, end)) == expected


@pytest.mark.parametrize("store", [WINDOW, INT_WINDOW])
def test_all_windows_page_by_key_and_start_after_the_cursor(fx: Fixture, store: str) -> None:
    rng = random.Random(38)
    for _ in range(70):
        start = rng.randrange(-1, 9) * WINDOW_MS + rng.choice([0, 0, 1, -1])
        end = start + rng.randrange(0, 6) * WINDOW_MS + rng.choice([0, 0, 1, -1])
        after = None
        if rng.random() < 0.6:
            picked = rng.choice(fx.rows[store])
            after = (picked[0], picked[1] + rng.choice([0, 0, 1, -1]))
        limit = rng.randrange(1, 40)
        expected = [
            r
            for r in fx.rows[store]  # already in (key, start) order
            if start <= r[1] <= end and (after is None or (r[0], r[1]) > after)
        ][:limit]
        assert fx.run(store, Windows(start, end, limit, after)) == expected


def test_paging_through_a_range_with_the_last_key_visits_every_row_once(fx: Fixture) -> None:
    for store in (TABLE, AGGREGATE):
        seen: list[Row] = []
        after = None
        while True:
            page = fx.run(store, Range(None, None, 17, after))
            if not page:
                break
            seen += page
            after = page[-1][0]
        assert seen == fx.rows[store]


# --- execute(): the failures a replica answers with ---------------------------------------


class FakeCatalog:
    def __init__(self, fx: Fixture, snapshot: Snapshot | None) -> None:
        self.fx, self.snapshot = fx, snapshot

    @contextmanager
    def lease(self, partition: int) -> Iterator[Snapshot | None]:
        yield self.snapshot

    def cursor(self) -> duckdb.DuckDBPyConnection:
        return self.fx.cursor


def answer(fx: Fixture, q: SubQuery, snapshot: Snapshot | None, node: str = "node1") -> Any:
    topology = Topology.static(fx.project.cluster)
    catalog = FakeCatalog(fx, snapshot)
    (result,) = execution.execute(catalog, fx.project, topology, node, [q])  # type: ignore[arg-type]
    return result


@functools.cache
def declared() -> tuple[Store, ...]:
    """The test project's stores of partition 0: what a base built by its pipeline holds."""
    return chains.stores(load(write_project(Path(tempfile.mkdtemp()), [1, 2, 3])), 0)


def snapshot_at(
    offsets: dict[str, int], created_ms: int = 0, overlay: Overlay | None = None
) -> Snapshot:
    layer = LocalLayer(7, "base", Path("x"))
    header = LayerHeader(offsets, created_ms)
    base = Base(layer, "snap", header, declared(), tables={})
    if overlay is not None:  # the newest layer's header is the snapshot's
        overlay = Overlay(header, overlay.levels)
    return Snapshot(0, base, overlay, (layer,))


def test_execute_answers_rows_with_the_snapshot_version_and_offsets(fx: Fixture) -> None:
    key = fx.rows[TABLE][5][0]
    result = answer(
        fx,
        SubQuery(3, 0, TABLE, Get((key,)), bound={"bookings": 4}),
        snapshot_at({"bookings": 4}, overlay=fx.snapshot.overlay),
    )
    assert result.ok and result.rows == [fx.rows[TABLE][5]]
    assert (result.id, result.version, result.offsets) == (3, 7, {"bookings": 4})
    assert result.active == (fx.project.cluster.replica_map[0][0] == "node1")


@pytest.mark.parametrize(
    ("q", "snapshot", "node", "failure"),
    [
        (SubQuery(0, 0, "nope", Get(("a",))), snapshot_at({}), "node1", Failure.DOES_NOT_EXIST),
        (SubQuery(0, 0, TABLE, Get(("a",))), None, "node1", Failure.NOT_PRESENT),
        (
            SubQuery(0, 0, TABLE, Get(("a",)), bound={"bookings": 5}),
            snapshot_at({"bookings": 4}),
            "node1",
            Failure.NOT_UP_TO_BOUND,
        ),
        (
            SubQuery(0, 0, TABLE, Get(("a",)), bound={"trains": 1}),
            snapshot_at({"bookings": 4}),
            "node1",
            Failure.NOT_UP_TO_BOUND,
        ),
        (
            SubQuery(0, 0, TABLE, Get(("a",)), max_age_ms=60_000),
            snapshot_at({}, created_ms=1),
            "node1",
            Failure.NOT_UP_TO_BOUND,
        ),
        (
            SubQuery(0, 0, "trainStatus", Get((1,))),
            snapshot_at({}),
            "node1",
            Failure.STORE_EXCEPTION,
        ),
    ],
    ids=["unknown-store", "no-snapshot", "behind-bound", "topic-missing", "too-old", "no-table"],
)
def test_execute_fails_a_partition_with_the_reason(
    fx: Fixture, q: SubQuery, snapshot: Snapshot | None, node: str, failure: Failure
) -> None:
    result = answer(fx, q, snapshot, node)
    assert result.failure is failure
    assert result.rows is None
    assert result.message


def test_execute_refuses_a_standby_when_the_active_replica_is_required(fx: Fixture) -> None:
    active, standby = fx.project.cluster.replica_map[0][:2]
    q = SubQuery(0, 0, TABLE, Get(("a",)), require_active=True)
    assert answer(fx, q, snapshot_at({}), standby).failure is Failure.NOT_ACTIVE
    assert answer(fx, q, snapshot_at({}), active).ok


def in_memory(fx: Fixture, store: Store) -> LayeredTable:
    """The lookups a node builds for the fixture's snapshot: the base, under the levels."""
    base = LookupTable.load(fx.cursor, "snap", store)
    assert base is not None
    levels = []
    for level in fx.snapshot.overlay.levels if fx.snapshot.overlay else ():
        select = f"SELECT {', '.join(columns(store))}, _deleted FROM {level.relation(store.name)}"
        frame = fx.cursor.sql(select).to_arrow_table()
        table = LookupTable.from_arrow(frame, store.key_type != "string")
        assert table is not None and table.rows > 0
        levels.append(table)
    return LayeredTable(base, levels)


@pytest.mark.parametrize("store", [TABLE, AGGREGATE])
def test_the_in_memory_table_answers_lookups_like_the_sql(fx: Fixture, store: str) -> None:
    table = in_memory(fx, fx.project.stores[store])
    rng = random.Random(40)
    probes = ["", "a\x00", "x" * (MAX_KEY_BYTES + 1), "\ud800", 2**70, -(2**70), 1.5]
    for _ in range(200):
        keys = tuple(candidate_key(rng, fx, store) for _ in range(rng.choice([1, 1, 2, 30])))
        if rng.random() < 0.2:
            keys += (rng.choice(probes),)
        expected = [r for r in fx.rows[store] if r[0] in set(keys)]
        assert by_key(table.get(keys)) == by_key(expected), keys


@pytest.mark.parametrize("awkward", ["a\x00", "y" * (MAX_KEY_BYTES + 1)])
def test_keys_the_index_cannot_hold_leave_the_store_to_duckdb(awkward: str, tmp_path: Path) -> None:
    project = load(write_project(tmp_path, [1, 2, 3]))
    store = project.stores[TABLE]
    connection = duckdb.connect(":memory:")
    connection.execute("ATTACH ':memory:' AS snap")
    typed = stored_columns(store)
    definitions = ", ".join(f'"{column}" {duck_type}' for column, duck_type in typed.items())
    connection.execute(f'CREATE TABLE snap."{TABLE}" ({definitions})')
    connection.execute(f'INSERT INTO snap."{TABLE}" (key) VALUES (?), (?)', ["a", awkward])
    assert LookupTable.load(connection.cursor(), "snap", store) is None
    connection.close()
