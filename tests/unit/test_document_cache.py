"""The documents a node keeps parsed, validated and compiled: bounded by count and by the
memory their text stands for (resolvers/execution/lru.py, resolvers/execution/operations.py)."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import pytest

from contracts import project as projects
from contracts.settings import Settings
from resolvers.execution.lru import LRU
from resolvers.execution.operations import MIB, Operations, Refused
from resolvers.execution.persisted import Source
from resolvers.schema.build import build_schema
from tests.projects import write_project

BUDGET_MB = 8


def test_the_oldest_go_first_by_count_and_by_weight() -> None:
    made: list[str] = []
    cache = LRU(3, lambda k: made.append(k) or k.upper(), len, budget=10)
    assert [cache(k) for k in ("aa", "bb", "cc")] == ["AA", "BB", "CC"]
    cache("aa")  # used again: now the newest
    cache("dd")  # a fourth: "bb", the least recently used, goes
    assert (len(cache), cache.weight) == (3, 6)
    cache("bb")
    assert made == ["aa", "bb", "cc", "dd", "bb"]
    cache("eeeeeeee")  # 8 of a budget of 10: all but it and the one before go
    assert (len(cache), cache.weight) == (2, 10)
    cache("x" * 50)  # heavier than the whole budget: kept alone, it is the newest
    assert (len(cache), cache.weight) == (1, 50)


def aliased(n: int, salt: int) -> str:
    fields = " ".join(
        f'a{i}_{salt}: customerTotals(key: "C{i:06d}") {{ record {{ bookings revenue }} }}'
        for i in range(n)
    )
    return "{ " + fields + " }"


@pytest.mark.parametrize("workers", [1, 2])
def test_many_large_documents_stay_within_the_memory_budget(tmp_path: Path, workers: int) -> None:
    """Distinct documents of 100 aliased lookups each, 20 of them, each asked twice (a large
    one is kept from its second request on): without the budget the cache would keep them
    all (about 28 MB); with 8 MB it keeps what fits, and the memory Python holds after them
    all stays within the budget, or within a worker's share of it."""
    project = projects.load(write_project(tmp_path, [1, 2, 3]))
    settings = Settings(document_cache_mb=BUDGET_MB)  # type: ignore[call-arg]
    operations = Operations(build_schema(project), settings, None, workers=workers)
    documents = [aliased(100, salt) for salt in range(20)]
    gc.collect()
    tracemalloc.start()
    try:
        for document in documents:
            operations.prepare(Source(document, None), {})
            operations.prepare(Source(document, None), {})
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert 1 < len(operations._parsed) < len(documents)
    assert held < BUDGET_MB * MIB * 1.25 / workers, held / MIB


def test_a_large_document_is_kept_from_its_second_request_on(tmp_path: Path) -> None:
    """A document sent once (its keys written into its text) pushes nothing out and is not
    kept; the same document sent again is; a small one is kept at once."""
    project = projects.load(write_project(tmp_path, [1, 2, 3]))
    settings = Settings(document_cache_mb=BUDGET_MB)  # type: ignore[call-arg]
    operations = Operations(build_schema(project), settings, None)
    small = Source(aliased(2, 0), None)
    operations.prepare(small, {})
    assert operations.ready(small.query, None, None) is not None
    large = [Source(aliased(100, salt), None) for salt in (1, 2)]
    for source in large:
        operations.prepare(source, {})
    assert len(operations._parsed) == 1 and operations.ready(large[0].query, None, None) is None
    assert operations.ready(small.query, None, None) is not None  # still kept
    again = operations.prepare(large[0], {})
    assert operations.ready(large[0].query, None, None) is again
    with pytest.raises(Refused):  # refused, once: its parse and errors are not kept either
        operations.prepare(Source(aliased(100, 3) + " { nope }", None), {})
    assert len(operations._parsed) == 2 and len(operations._errors) == 2


def test_an_operation_of_fixed_cost_is_checked_once_until_the_limits_change(
    tmp_path: Path,
) -> None:
    """A document whose cost reads no argument (one key per field) passes or fails alike
    for every request: its second request gets the operation prepared by the first. One
    whose cost reads its arguments (a list of keys) is measured each time, and a reload's
    limits hold from the next request on."""
    project = projects.load(write_project(tmp_path, [1, 2, 3]))
    operations = Operations(build_schema(project), Settings(), None)  # type: ignore[call-arg]
    fixed = Source(aliased(3, 0), None)
    first = operations.prepare(fixed, {})
    assert operations.prepare(fixed, {"unused": 1}) is first
    listed = "query Q($k: [String!]!) { customerTotalsBatch(keys: $k) { entries { key } } }"
    keys = Source(listed, None)
    assert (
        operations.prepare(keys, {"k": ["C1"]}).cost
        < operations.prepare(keys, {"k": ["C1", "C2", "C3"]}).cost
    )
    operations.take(Settings(max_aliases=2))  # type: ignore[call-arg]
    with pytest.raises(Refused, match="max_aliases"):
        operations.prepare(fixed, {})


def test_a_ready_operation_keeps_its_parts_in_the_other_caches(tmp_path: Path) -> None:
    """A hot document of fixed cost among many of varying cost: each request of it makes
    its parts the newest in every cache, so the documents kept are the same everywhere and
    stay within one budget (not one per cache)."""
    project = projects.load(write_project(tmp_path, [1, 2, 3]))
    settings = Settings(document_cache_size=3)  # type: ignore[call-arg]
    operations = Operations(build_schema(project), settings, None)
    hot = Source(aliased(2, 0), None)
    for salt in range(6):
        batch = "customerTotalsBatch(keys: $k) { entries { key } }"
        listed = f"query Q{salt}($k: [String!]!) {{ {batch} }}"
        operations.prepare(Source(listed, None), {"k": ["C1"]})
        operations.prepare(hot, {})
    kept = {key for key in operations._ready._entries}
    assert (hot.query, None) in kept
    assert kept <= set(operations._executors._entries), "a ready operation's plan was dropped"
    assert {q for q, _ in kept} <= set(operations._parsed._entries)
