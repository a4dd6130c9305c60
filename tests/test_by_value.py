"""Asking by value (sList, sAggregate) from every node, against an oracle computed from the raw
log: random filters of every operator on every field type (nulls, ties, Unicode, int
extremes), random orders paged through to the end with cursors, and the totals of the same
filters. The oracle evaluates filters and orders itself, by the README's rules: a null value
fails every condition but isNull, `not` of a failing condition holds, nulls sort last, ties
go by key."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import pytest

from contracts.project import Store
from tests import wire
from tests.test_queries import META, NODES, all_rows, check_meta
from tests.wire import as_row, selection

KEYED = ["latestBooking", "customerTotals", "trainStatus", "trainDelays"]
WINDOWED = ["hourlyRevenue", "delaysHopping"]
STORES = [*KEYED, *WINDOWED]
WIDE = {"from": "1969-12-31T00:00:00Z", "to": "2027-01-01T00:00:00Z"}  # every window
GRAPHQL_TYPES = {"string": "String", "int": "Int", "long": "Long", "double": "Float",
                 "boolean": "Boolean"}  # fmt: skip
COMPARED = ("eq", "ne", "in", "lt", "lte", "gt", "gte", "isNull")
OPS = {"string": (*COMPARED, "startsWith"), "int": COMPARED, "long": COMPARED,
       "double": COMPARED, "boolean": ("eq", "ne", "isNull")}  # fmt: skip


def fields_of(store: Store) -> dict[str, str]:
    """The fields of a store's rows, as the oracle's rows hold them."""
    window = {"window_start": "long"} if store.kind == "window" else {}
    return {"key": store.key_type, **window, **store.columns}


def filterable(store: Store) -> dict[str, str]:
    return {"key": store.key_type, **store.columns}


def identity(store: Store) -> list[str]:
    return ["key", "window_start"] if store.kind == "window" else ["key"]


# -- the oracle ----------------------------------------------------------------------------


def holds(row: dict[str, Any], where: dict[str, Any]) -> bool:
    """Whether a row (field -> value) passes a filter as GraphQL input."""
    for name, condition in where.items():
        if name == "and":
            ok = all(holds(row, part) for part in condition)
        elif name == "or":
            ok = any(holds(row, part) for part in condition)
        elif name == "not":
            ok = not holds(row, condition)
        else:
            ok = all(_test(row[name], op, operand) for op, operand in condition.items())
        if not ok:
            return False
    return True


def _test(value: Any, op: str, operand: Any) -> bool:
    if op == "isNull":
        return (value is None) == operand
    if value is None:
        return False
    match op:
        case "eq":
            return value == operand
        case "ne":
            return value != operand
        case "in":
            return value in operand
        case "lt":
            return value < operand
        case "lte":
            return value <= operand
        case "gt":
            return value > operand
        case "gte":
            return value >= operand
        case "startsWith":
            return value.startswith(operand)
    raise AssertionError(op)


def ordered(
    rows: list[dict[str, Any]], order: list[tuple[str, bool]], ids: tuple[str, ...] = ("key",)
) -> list[dict[str, Any]]:
    """Sorted by the order's fields (nulls last either way), then by the identity's fields
    (`ids`) not in it: stable sorts from the last term to the first."""
    terms = [*order, *((f, False) for f in ids if f not in {f for f, _ in order})]
    result = list(rows)
    for field, descending in reversed(terms):
        present = [r for r in result if r[field] is not None]
        present.sort(key=lambda r: r[field], reverse=descending)
        result = present + [r for r in result if r[field] is None]
    return result


def expected_rows(served, store: Store) -> list[dict[str, Any]]:
    names = list(fields_of(store))
    return [dict(zip(names, row, strict=True)) for row in all_rows(served, store.name)]


# -- random inputs -------------------------------------------------------------------------


def random_operand(rng: random.Random, kind: str, seen: list[Any]) -> Any:
    pool = [v for v in seen if v is not None]
    if kind == "string":
        pool += ["", "Z", "zz", "Köln", "日本", "C0001"]
        value = rng.choice(pool)
        return value[: rng.randrange(len(value) + 1)] if rng.random() < 0.3 else value
    if kind == "boolean":
        return rng.choice([True, False])
    if kind == "int":
        pool += [0, -1, 2**31 - 1, -(2**31)]
    if kind == "double":
        pool += [0.0, 100.5, -1.0]
    return rng.choice(pool) if pool else 0


def random_condition(rng: random.Random, kind: str, seen: list[Any]) -> dict[str, Any]:
    condition: dict[str, Any] = {}
    for op in rng.sample(OPS[kind], rng.choice([1, 1, 2])):
        if op == "isNull":
            condition[op] = rng.choice([True, False])
        elif op == "in":
            condition[op] = [random_operand(rng, kind, seen) for _ in range(rng.randrange(4))]
        elif op == "startsWith":
            condition[op] = random_operand(rng, "string", seen)[:2]
        else:
            condition[op] = random_operand(rng, kind, seen)
    return condition


def random_filter(rng: random.Random, store: Store, rows: list[dict], depth: int = 0) -> dict:
    fields = filterable(store)
    where: dict[str, Any] = {}
    for name in rng.sample(list(fields), rng.choice([1, 1, 2])):
        where[name] = random_condition(rng, fields[name], [r[name] for r in rows])
    roll = rng.random()
    if depth < 2 and roll < 0.2:
        where["or"] = [random_filter(rng, store, rows, depth + 1) for _ in range(2)]
    elif depth < 2 and roll < 0.3:
        where["not"] = random_filter(rng, store, rows, depth + 1)
    elif depth < 2 and roll < 0.35:
        where["and"] = [random_filter(rng, store, rows, depth + 1)]
    return where


def random_order(rng: random.Random, store: Store) -> list[tuple[str, bool]]:
    fields = list(fields_of(store))
    return [(f, rng.random() < 0.5) for f in rng.sample(fields, rng.choice([0, 1, 1, 2]))]


def enum_value(field: str, descending: bool) -> str:
    spelled = "".join(f"_{c}" if c.isupper() else c for c in field).upper()  # window_start too
    return f"{spelled}_{'DESC' if descending else 'ASC'}"


# -- asking --------------------------------------------------------------------------------


def span(store: Store) -> tuple[str, str, dict[str, str]]:
    """A window store's (variable definitions, arguments, values) of from and to."""
    if store.kind != "window":
        return "", "", {}
    return "$from: DateTime!, $to: DateTime!, ", "from: $from, to: $to, ", WIDE


def list_all(served, node: str, store: Store, where: dict | None, order, first: int) -> list:
    """Every page of sList, followed by its cursors; checks each page's meta."""
    kind = store.name[0].upper() + store.name[1:]
    definitions, arguments, bounds = span(store)
    query = (
        f"query({definitions}$where: {kind}Filter, $orderBy: [{kind}OrderBy!], $first: Int!, "
        f"$after: String) {{ {store.name}List({arguments}where: $where, orderBy: $orderBy, "
        f"first: $first, after: $after) {{ records {{ {selection(store)} }} pageInfo "
        f"{{ hasNextPage endCursor }} {META} }} }}"
    )
    got: list[tuple] = []
    after = None
    for _ in range(1000):
        variables = {"where": where, "orderBy": [enum_value(*o) for o in order], "first": first,
                     "after": after, **bounds}  # fmt: skip
        page = served.nodes.data(node, query, variables)[f"{store.name}List"]
        check_meta(served, page["meta"], list(range(served.project.cluster.partitions)))
        got += [as_row(store, r) for r in page["records"]]
        assert len(page["records"]) <= first
        if not page["pageInfo"]["hasNextPage"]:
            return got
        assert len(page["records"]) == first
        after = page["pageInfo"]["endCursor"]
    raise AssertionError("more than 1000 pages")


def same_rows(got: list[tuple], expected: list[tuple]) -> None:
    assert len(got) == len(expected), (len(got), len(expected))
    for g, e in zip(got, expected, strict=True):
        assert g == e or g == pytest.approx(e), (g, e)


def test_random_filters_and_orders_page_through_like_the_oracle(served) -> None:
    """Each case asks the next node in turn: every node answers every store's cases."""
    rng = random.Random("list")
    nodes = itertools.cycle(NODES)
    for name in STORES:
        store = served.project.stores[name]
        rows = expected_rows(served, store)
        names = list(fields_of(store))
        for _ in range(6):
            node = next(nodes)
            where = random_filter(rng, store, rows)
            order = random_order(rng, store)
            kept = [r for r in rows if holds(r, where)]
            expected = ordered(kept, order, tuple(identity(store)))
            first = rng.choice([1, 3, 17, 100])
            if len(expected) // first > 40:
                first = 500  # pages enough to cross cursors, not hundreds of requests
            got = list_all(served, node, store, where, order, first)
            same_rows(got, [tuple(r[n] for n in names) for r in expected])


def aggregate_query(store: Store) -> str:
    numbers = [c for c, t in store.columns.items() if t in ("int", "long", "double")]
    extremes = [c for c, t in store.columns.items() if t != "boolean"]
    parts = ["totalCount"]
    if numbers:
        parts += [f"sum {{ {' '.join(numbers)} }}", f"avg {{ {' '.join(numbers)} }}"]
    if extremes:
        parts += [f"min {{ {' '.join(extremes)} }}", f"max {{ {' '.join(extremes)} }}"]
    kind = store.name[0].upper() + store.name[1:]
    definitions, arguments, _ = span(store)
    return (
        f"query({definitions}$where: {kind}Filter) {{ {store.name}Aggregate({arguments}"
        f"where: $where) {{ {' '.join(parts)} {META} }} }}"
    )


def expected_totals(store: Store, rows: list[dict]) -> dict[str, Any]:
    totals: dict[str, Any] = {"totalCount": len(rows)}
    for column, kind in store.columns.items():
        values = [r[column] for r in rows if r[column] is not None]
        if kind in ("int", "long", "double"):
            total = sum(values) if values else None
            totals[f"sum.{column}"] = total
            totals[f"avg.{column}"] = total / len(values) if values else None
        if kind != "boolean":
            totals[f"min.{column}"] = min(values, default=None)
            totals[f"max.{column}"] = max(values, default=None)
    return totals


def read_totals(store: Store, result: dict[str, Any]) -> dict[str, Any]:
    totals: dict[str, Any] = {"totalCount": wire.long(result["totalCount"])}
    for part in ("sum", "avg", "min", "max"):
        for column, value in (result.get(part) or {}).items():
            kind = store.columns[column]
            integral = part != "avg" and (kind == "long" or (kind, part) == ("int", "sum"))
            totals[f"{part}.{column}"] = wire.maybe_long(value) if integral else value
    return totals


def test_totals_of_random_filters_equal_the_oracle(served) -> None:
    """Each case asks the next node in turn."""
    rng = random.Random("totals")
    nodes = itertools.cycle(NODES)
    for name in STORES:
        store = served.project.stores[name]
        rows = expected_rows(served, store)
        query = aggregate_query(store)
        for where in [None, {}, *(random_filter(rng, store, rows) for _ in range(7))]:
            kept = [r for r in rows if holds(r, where or {})]
            variables = {"where": where, **span(store)[2]}
            result = served.nodes.data(next(nodes), query, variables)[f"{name}Aggregate"]
            check_meta(served, result["meta"], list(range(served.project.cluster.partitions)))
            got, expected = read_totals(store, result), expected_totals(store, kept)
            assert got.keys() == expected.keys()
            for field, value in expected.items():
                if isinstance(value, float):
                    assert math.isclose(got[field], value, rel_tol=1e-9), (where, field)
                else:
                    assert got[field] == value, (where, field)


def test_top_ten_of_every_numeric_field(served) -> None:
    """The leaderboard: each numeric column's top 10 (and bottom 10), ties by key."""
    for name in KEYED:
        store = served.project.stores[name]
        rows = expected_rows(served, store)
        names = list(fields_of(store))
        for column, kind in store.columns.items():
            if kind not in ("int", "long", "double"):
                continue
            for descending in (True, False):
                expected = ordered(rows, [(column, descending)])[:10]
                query = (
                    f"{{ {name}List(orderBy: [{enum_value(column, descending)}], first: 10) "
                    f"{{ records {{ {selection(store)} }} pageInfo {{ hasNextPage }} }} }}"
                )
                page = served.nodes.data("node2", query)[f"{name}List"]
                assert page["pageInfo"]["hasNextPage"] is (len(rows) > 10)
                same_rows(
                    [as_row(store, r) for r in page["records"]],
                    [tuple(r[n] for n in names) for r in expected],
                )


def test_inputs_that_match_nothing_by_mistake_are_refused(served) -> None:
    for query, code in [
        ('{ latestBookingList(where: {price: {gt: null}}) { records { key } } }',
         "BAD_USER_INPUT"),
        ('{ latestBookingList(where: {price: null}) { records { key } } }', "BAD_USER_INPUT"),
        ('{ latestBookingAggregate(where: {or: [{trip: {eq: null}}]}) { totalCount } }',
         "BAD_USER_INPUT"),
        ('{ latestBookingList(first: 0) { records { key } } }', "PAGE_SIZE_OUT_OF_RANGE"),
        ('{ latestBookingList(orderBy: [PRICE_DESC], after: "nonsense") { records { key } } }',
         "BAD_CURSOR"),
    ]:  # fmt: skip
        body = served.nodes.gql("node1", query)
        assert [e["extensions"]["code"] for e in body["errors"]] == [code], (query, body)
    deep = "{price: {gt: 1}}"
    for _ in range(20):
        deep = f"{{not: {deep}}}"
    body = served.nodes.gql(
        "node1", f"{{ latestBookingAggregate(where: {deep}) {{ totalCount }} }}"
    )
    assert [e["extensions"]["code"] for e in body["errors"]] == ["FILTER_TOO_DEEP"]


@pytest.mark.parametrize(
    "inner", [{"price": {"gt": 100}}, {"price": {"gt": 100}, "seats": {"gt": 1}}]
)
def test_a_filter_may_nest_and_or_not_sixteen_levels_and_no_more(served, inner: dict) -> None:
    """README, Asking by value: a level is one and, or or not; the conditions of one filter
    object (and their implicit and) add none. Every node gives the same verdict."""
    rows = expected_rows(served, served.project.stores["latestBooking"])
    query = (
        "query($where: LatestBookingFilter) { latestBookingAggregate(where: $where) "
        "{ totalCount } }"
    )
    for levels, node in ((16, "node1"), (17, "node2"), (16, "node3"), (17, "node1")):
        for combinator in ("and", "or", "not"):
            where: dict[str, Any] = inner
            for _ in range(levels):
                where = {"not": where} if combinator == "not" else {combinator: [where]}
            body = served.nodes.gql(node, query, {"where": where})
            if levels > 16:
                assert [e["extensions"]["code"] for e in body["errors"]] == ["FILTER_TOO_DEEP"]
                continue
            assert not body.get("errors"), body["errors"]
            count = wire.long(body["data"]["latestBookingAggregate"]["totalCount"])
            assert count == sum(holds(row, where) for row in rows)


def test_a_cursor_belongs_to_its_order(served) -> None:
    first = served.nodes.data(
        "node1", "{ latestBookingList(orderBy: [PRICE_DESC], first: 5) { pageInfo { endCursor } } }"
    )
    cursor = first["latestBookingList"]["pageInfo"]["endCursor"]
    for order in ("[PRICE_ASC]", "[SEATS_DESC]", "[]"):
        body = served.nodes.gql(
            "node1",
            f'{{ latestBookingList(orderBy: {order}, after: "{cursor}") {{ records {{ key }} }} }}',
        )
        (error,) = body["errors"]
        assert error["extensions"]["code"] == "BAD_CURSOR"
        assert "another order" in error["message"]


def test_window_stores_rank_and_total_the_windows_in_from_to(served) -> None:
    """The top windows by revenue whose start lies in a span, and their totals."""
    from tests.projects import HOUR_MS, START_MS
    from tests.wire import iso

    store = served.project.stores["hourlyRevenue"]
    rows = expected_rows(served, store)
    low, high = START_MS + HOUR_MS, START_MS + 3 * HOUR_MS
    inside = [r for r in rows if low <= r["window_start"] <= high]
    assert inside and len(inside) < len(rows)
    bounds = {"from": iso(low), "to": iso(high)}
    query = (
        "query($from: DateTime!, $to: DateTime!) { hourlyRevenueList(from: $from, to: $to, "
        f"orderBy: [REVENUE_DESC], first: 7) {{ records {{ {selection(store)} }} }} "
        "hourlyRevenueAggregate(from: $from, to: $to) { totalCount sum { revenue } } }"
    )
    data = served.nodes.data("node3", query, bounds)
    want = ordered(inside, [("revenue", True)], ("key", "window_start"))[:7]
    names = list(fields_of(store))
    same_rows([as_row(store, r) for r in data["hourlyRevenueList"]["records"]],
              [tuple(r[n] for n in names) for r in want])  # fmt: skip
    totals = data["hourlyRevenueAggregate"]
    assert wire.long(totals["totalCount"]) == len(inside)
    revenue = sum(r["revenue"] for r in inside if r["revenue"] is not None)
    assert math.isclose(totals["sum"]["revenue"], revenue, rel_tol=1e-9)
    backwards = served.nodes.gql("node3", query, {"from": bounds["to"], "to": bounds["from"]})
    assert {e["extensions"]["code"] for e in backwards["errors"]} == {"INVALID_RANGE"}


def test_a_partition_that_cannot_answer_is_reported_not_dropped(served) -> None:
    """A bound no replica of partition 3 can meet: the page and the totals hold the other
    partitions' rows, and meta names partition 3 as failed."""
    from contracts.partitioner import partition_for

    store = served.project.stores["latestBooking"]
    rows = expected_rows(served, store)
    others = [r for r in rows if partition_for(r["key"], "string", 9) != 3]
    bound = '{position: [{topic: "bookings", partition: 3, offset: "999999999"}]}'
    query = (
        f"{{ latestBookingList(orderBy: [PRICE_DESC], first: 20, consistency: {bound}) "
        "{ records { key trip price seats } meta { partial partitionsFailed "
        "partitions { partition failure } } } "
        f"latestBookingAggregate(consistency: {bound}) {{ totalCount meta {{ partial }} }} }}"
    )
    data = served.nodes.data("node1", query)
    page, totals = data["latestBookingList"], data["latestBookingAggregate"]
    names = list(fields_of(store))
    want = ordered(others, [("price", True)])[:20]
    same_rows(
        [as_row(store, r) for r in page["records"]], [tuple(r[n] for n in names) for r in want]
    )
    assert page["meta"]["partial"] and page["meta"]["partitionsFailed"] == 1
    failed = [p for p in page["meta"]["partitions"] if p["failure"]]
    assert failed == [{"partition": 3, "failure": "NOT_UP_TO_BOUND"}]
    assert totals["meta"]["partial"] and wire.long(totals["totalCount"]) == len(others)
