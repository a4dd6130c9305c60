"""Ordered pages and totals from memory (gateway/storage/memory/ordered.py, summing.py) equal
storage's SQL for the same Select or Totals, over a base and two levels that replace and
delete rows: random data with nulls, ties and Unicode, random filters, both directions,
cursors taken from earlier pages, and walks long enough to give up (None, never a wrong
page)."""

from __future__ import annotations

import random
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from contracts.conditions import KEY, AllOf, AnyOf, Condition, Filter, Not
from contracts.project import Store, Topic
from gateway.model.filters import Sort
from gateway.model.queries import NOT_HERE, Select, Totals
from gateway.storage.catalog.layers import LayeredTable
from gateway.storage.memory import ordered
from gateway.storage.memory.lookup_table import LookupTable
from gateway.storage.memory.masks import vectorized
from gateway.storage.sql import statements

# trip has few distinct values (kept as codes), note many (kept as Arrow strings)
TOPIC = Topic(
    "t", "string", {"price": "double", "seats": "int", "trip": "string", "note": "string"}
)
STORE = Store("s", "table", TOPIC, index=("price", "seats", "trip"))
WORDS = ["", "a", "ab", "Zoë", "Köln", "日本", "🚆", "b"]
NAMES = ["key", "price", "seats", "trip", "note", "_deleted"]
SCHEMA = pa.schema(
    [
        (n, t)
        for n, t in zip(
            NAMES,
            [pa.string(), pa.float64(), pa.int32(), pa.string(), pa.string(), pa.bool_()],
            strict=True,
        )
    ]
)


def random_row(rng: random.Random, key: str) -> tuple[Any, ...]:
    def maybe(value: Any) -> Any:
        return None if rng.random() < 0.1 else value

    price = maybe(rng.choice([1.5, 2.0, 99.5, 150.25, -3.0, 0.0]))
    note = maybe(f"n{rng.randrange(10**6)}")
    return key, price, maybe(rng.randint(1, 4)), maybe(rng.choice(WORDS)), note


def build(rng: random.Random) -> tuple[duckdb.DuckDBPyConnection, LayeredTable]:
    keys = sorted({f"k{rng.randrange(10_000):05d}" for _ in range(1500)} | set(WORDS))
    connection = duckdb.connect()
    columns = '"key" VARCHAR, price DOUBLE, seats INT, trip VARCHAR, note VARCHAR'
    connection.execute(f"CREATE TABLE b ({columns})")
    rows = [random_row(rng, k) for k in keys]
    connection.executemany("INSERT INTO b VALUES (?, ?, ?, ?, ?)", rows)
    # two levels, the newer over the older; `o` holds their merge, for SQL
    newest: dict[str, tuple[Any, ...]] = {}
    levels = []
    for _ in range(2):
        changed = rng.sample(keys, 150) + ["new1", "new2", "Zz"]
        level = [(*random_row(rng, k), rng.random() < 0.3) for k in sorted(set(changed))]
        newest.update((row[0], row) for row in level)
        frame = pa.Table.from_pylist(
            [dict(zip(NAMES, row, strict=True)) for row in level], schema=SCHEMA
        )
        table = LookupTable.from_arrow(frame, False)
        assert table is not None
        levels.append(table)
    connection.execute(f"CREATE TABLE o ({columns}, _deleted BOOLEAN)")
    connection.executemany("INSERT INTO o VALUES (?, ?, ?, ?, ?, ?)", list(newest.values()))
    base_rows = connection.sql("SELECT * FROM b ORDER BY key").to_arrow_table()
    base = LookupTable.from_arrow(base_rows, False, STORE.index)
    assert base is not None
    return connection, LayeredTable(base, levels)


def random_filter(rng: random.Random) -> Filter | None:
    roll = rng.random()
    if roll < 0.3:
        return None
    tests: list[Filter] = [
        Condition("seats", rng.choice(["eq", "ne", "gte", "lt"]), rng.randint(1, 4)),
        Condition("price", rng.choice(["gt", "lte", "ne"]), rng.choice([0.0, 2.0, 99.5])),
        Condition("trip", "startsWith", rng.choice(["", "a", "K", "日"])),
        Condition("trip", "isNull", rng.random() < 0.5),
        Condition("price", "in", (2.0, 150.25)),
        Condition(KEY, "gt", "k05000"),
        Condition("note", rng.choice(["startsWith", "gte"]), rng.choice(["n1", "n5", ""])),
        Condition("note", "isNull", rng.random() < 0.5),
    ]
    picked = tuple(rng.sample(tests, rng.randint(1, 2)))
    if roll < 0.7:
        return AllOf(picked)
    return AnyOf(picked) if roll < 0.85 else Not(picked[0])


def sql_page(connection: duckdb.DuckDBPyConnection, query: Select) -> list[list[Any]]:
    sql, args = statements.select(STORE, statements.source(STORE, "b", "o"), query)
    return [list(row) for row in connection.execute(sql, args).fetchall()]


@pytest.mark.parametrize("seed", range(1))
def test_memory_pages_equal_sql_pages(seed: int) -> None:
    rng = random.Random(seed)
    connection, table = build(rng)
    answered = 0
    for _ in range(60):
        field = rng.choice(STORE.index)
        order = (Sort(field, rng.random() < 0.5), Sort(KEY))
        where = random_filter(rng)
        limit = rng.choice([1, 5, 40])
        after = None
        for _ in range(4):  # pages, each after the last one's last row
            query = Select(where, order, limit, after)
            expected = sql_page(connection, query)
            got = table.select(STORE, query)
            if got is not NOT_HERE:
                answered += 1
                assert got == expected, (query, got[:3], expected[:3])
            if len(expected) < limit:
                break
            last = expected[-1]
            after = (last[1 + list(STORE.columns).index(field)], last[0])
    assert answered > 80  # memory answered most pages (a rare filter may walk too far)


def test_a_select_memory_cannot_answer_is_none() -> None:
    _, table = build(random.Random(1))
    by_two = (Sort("price"), Sort("seats"), Sort(KEY))
    assert table.select(STORE, Select(None, by_two, 5)) is NOT_HERE
    assert table.select(STORE, Select(None, (Sort(KEY),), 5)) is NOT_HERE


def test_a_walk_past_its_limit_gives_way_to_sql(monkeypatch: pytest.MonkeyPatch) -> None:
    _, table = build(random.Random(2))
    monkeypatch.setattr(ordered, "WALK_LIMIT", 100)
    never = Condition("trip", "eq", "no such trip")
    assert table.select(STORE, Select(never, (Sort("price"), Sort(KEY)), 5)) is NOT_HERE


def sql_totals(connection: duckdb.DuckDBPyConnection, query: Totals) -> list[Any]:
    sql, args = statements.totals(STORE, statements.source(STORE, "b", "o"), query)
    return list(connection.execute(sql, args).fetchall()[0])


@pytest.mark.parametrize("seed", range(1))
def test_memory_totals_equal_sql_totals(seed: int) -> None:
    rng = random.Random(f"totals-{seed}")
    connection, table = build(rng)
    for _ in range(40):
        query = Totals(random_filter(rng))
        expected = sql_totals(connection, query)
        got = table.totals(STORE, query)
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            assert g == (pytest.approx(e) if isinstance(e, float) else e), (query, got, expected)


def test_only_a_filter_numpy_tests_whole_runs_on_the_event_loop() -> None:
    """execution.on_loop runs a walk on the loop only when no value of it is tested in
    Python: numbers and coded strings are, Arrow strings and keys are not."""
    _, table = build(random.Random(3))
    base = table.base
    seats, trip = Condition("seats", "eq", 2), Condition("trip", "startsWith", "a")
    note, key = Condition("note", "startsWith", "n1"), Condition(KEY, "gt", "k")
    assert vectorized(None, base, STORE) and vectorized(Not(AnyOf((seats, trip))), base, STORE)
    assert not vectorized(note, base, STORE) and not vectorized(key, base, STORE)
    assert not vectorized(AllOf((seats, note)), base, STORE)
