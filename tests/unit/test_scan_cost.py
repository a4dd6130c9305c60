"""What asking by value costs before it runs: a page ordered by an indexed column (or the key)
and unfiltered costs its rows; a filter, an order without an index, or totals read the whole
store, which adds its rows / SCAN_ROWS_PER_UNIT, so a store large enough is refused with
COST_LIMIT_EXCEEDED (a node estimates a store's rows from the snapshots it serves)."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts import project as projects
from resolvers.execution.cost import SCAN_ROWS_PER_UNIT
from resolvers.execution.operations import Operations, Refused
from resolvers.execution.persisted import Source
from resolvers.schema.build import build_schema
from tests.projects import write_project

LIMIT = 10_000
SCANNED = [
    "{ latestBookingList(where: {seats: {eq: 2}}, orderBy: [PRICE_DESC], first: 10) "
    "{ records { key } } }",
    "{ latestBookingList(orderBy: [SEATS_DESC], first: 10) { records { key } } }",
    "{ latestBookingList(orderBy: [KEY_DESC], first: 10) { records { key } } }",
    "{ latestBookingAggregate { totalCount } }",
    "{ latestBookingAggregate(where: {price: {gt: 5}}) { totalCount } }",
]
CHEAP = [
    "{ latestBookingList(orderBy: [PRICE_DESC], first: 10) { records { key } } }",
    "{ latestBookingList(orderBy: PRICE_ASC, first: 10) { records { key } } }",
    "{ latestBookingList(first: 10) { records { key } } }",
    "{ latestBookingList(orderBy: [KEY_ASC], first: 10) { records { key } } }",
]


def operations(tmp_path: Path, rows: int) -> Operations:
    settings = f"max_request_cost = {LIMIT}"
    project = projects.load(write_project(tmp_path, [7001], replicas=1, settings=settings))
    return Operations(build_schema(project), project.settings, None, lambda store: rows)


@pytest.mark.parametrize("document", SCANNED)
def test_a_scan_of_a_large_store_is_refused_and_of_a_small_one_admitted(
    tmp_path: Path, document: str
) -> None:
    small = operations(tmp_path, rows=SCAN_ROWS_PER_UNIT * 100)
    assert 100 <= small.prepare(Source(document, None), {}).cost < LIMIT
    large = operations(tmp_path, rows=SCAN_ROWS_PER_UNIT * LIMIT)
    with pytest.raises(Refused) as refused:
        large.prepare(Source(document, None), {})
    (error,) = refused.value.errors
    assert error["extensions"]["code"] == "COST_LIMIT_EXCEEDED"
    assert "without an index" in error["message"]


@pytest.mark.parametrize("document", CHEAP)
def test_an_unfiltered_page_by_an_index_or_the_key_costs_its_rows(
    tmp_path: Path, document: str
) -> None:
    large = operations(tmp_path, rows=SCAN_ROWS_PER_UNIT * LIMIT)
    assert large.prepare(Source(document, None), {}).cost < 100


@pytest.mark.parametrize("order", [[{"": None}], [["KEY_ASC"]], {"x": 1}, [None], [3]])
def test_an_order_not_of_the_enum_is_measured_then_refused_by_its_variables(
    tmp_path: Path, order: object
) -> None:
    """The cost is measured before the variables are checked (a fuzzed GET found a 500):
    whatever a variable holds, measuring it raises nothing, and it is refused for its type."""
    document = (
        "query($o: [LatestBookingOrderBy!]) "
        "{ latestBookingList(orderBy: $o, first: 10) { records { key } } }"
    )
    prepared = operations(tmp_path, rows=10).prepare(Source(document, None), {"o": order})
    assert prepared.cost >= 10


def test_entities_weigh_their_representations_as_a_batch_its_keys(tmp_path: Path) -> None:
    """A federation gateway's references cost what the same keys as one batch cost."""
    settings = f"max_request_cost = {LIMIT}\nfederation = true"
    project = projects.load(write_project(tmp_path, [7001], replicas=1, settings=settings))
    ops = Operations(build_schema(project), project.settings, None, lambda store: 0)
    keys = [f"C{i:04d}" for i in range(900)]
    entities = "query($r: [_Any!]!) { _entities(representations: $r) { __typename } }"
    batch = "query($k: [String!]!) { customerTotalsBatch(keys: $k) { entries { key } } }"
    representations = [{"__typename": "CustomerTotals", "key": k} for k in keys]
    weighed = ops.prepare(Source(entities, None), {"r": representations}).cost
    assert weighed == ops.prepare(Source(batch, None), {"k": keys}).cost >= len(keys)
