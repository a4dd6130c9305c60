"""Merging partition answers: a k-way merge of sorted runs is the global sort of their rows,
and positions merge over the partitions that answered only."""

from __future__ import annotations

import random
from collections.abc import Collection
from typing import Any

import pytest

from contracts.errors import Failure
from gateway.model import merging
from gateway.model.queries import Answer, Get, Range, Row, SubQuery, Windows

Part = tuple[SubQuery, Answer]


def random_key(rng: random.Random, key_type: str) -> str | int:
    if key_type == "string":
        return "".join(rng.choice("aAbé日🚆\U0010ffff") for _ in range(rng.randrange(0, 5)))
    return rng.randrange(-50, 50)


def random_runs(
    rng: random.Random, key_type: str, windowed: bool, partitions: int
) -> list[list[Row]]:
    """Distinct rows dealt to partitions, each partition's run sorted like a snapshot's."""
    sort_key = (lambda r: (r[0], r[1])) if windowed else (lambda r: r[0])
    seen: set[Any] = set()
    runs: list[list[Row]] = [[] for _ in range(partitions)]
    for _ in range(rng.randrange(0, 40)):
        key = random_key(rng, key_type)
        row: Row = [key, rng.randrange(0, 5) * 3600] if windowed else [key]
        if sort_key(row) in seen:
            continue
        seen.add(sort_key(row))
        row.append(rng.random())  # a value column
        runs[rng.randrange(partitions)].append(row)
    return [sorted(run, key=sort_key) for run in runs]


def parts_of(runs: list[list[Row]], query: Any, failed: Collection[int] = ()) -> list[Part]:
    parts = []
    for partition, rows in enumerate(runs):
        answer = Answer(id=partition, node="n", rows=rows, offsets={"t": partition})
        if partition in failed:
            answer.fail(Failure.NOT_PRESENT, "gone")
        parts.append((SubQuery(partition, partition, "s", query), answer))
    return parts


@pytest.mark.parametrize("key_type", ["string", "int"])
@pytest.mark.parametrize("windowed", [False, True])
def test_a_page_is_the_head_of_all_rows_sorted_and_says_whether_more_follow(
    key_type: str, windowed: bool
) -> None:
    rng = random.Random(f"{key_type}-{windowed}")
    query = Windows(0, 10, 5) if windowed else Range(None, None, 5)
    for _ in range(400):
        runs = random_runs(rng, key_type, windowed, rng.randrange(1, 6))
        limit = rng.randrange(1, 30)
        everything = [row for run in runs for row in run]
        expected = sorted(everything, key=lambda r: (r[0], r[1]) if windowed else r[0])
        rows, more = merging.page(
            parts_of(runs, query), limit, merging.BY_KEY_AND_START if windowed else merging.BY_KEY
        )
        assert rows == expected[:limit]
        assert more == (len(everything) > limit)


def test_a_window_page_orders_by_window_start_within_a_key() -> None:
    runs = [[["a", 7, "x"], ["b", 1, "y"]], [["a", 3, "z"]]]
    rows, more = merging.page(parts_of(runs, Windows(0, 10, 5)), 10, merging.BY_KEY_AND_START)
    assert [r[:2] for r in rows] == [["a", 3], ["a", 7], ["b", 1]]
    assert not more


def test_failed_partitions_add_no_rows_to_a_page() -> None:
    rng = random.Random(21)
    for _ in range(200):
        runs = random_runs(rng, "int", False, 4)
        failed = {p for p in range(4) if rng.random() < 0.4}
        kept = [row for p, run in enumerate(runs) if p not in failed for row in run]
        limit = rng.randrange(1, 20)
        rows, more = merging.page(
            parts_of(runs, Range(None, None, limit), failed), limit, merging.BY_KEY
        )
        assert rows == sorted(kept, key=lambda r: r[0])[:limit]
        assert more == (len(kept) > limit)


def test_an_answer_without_rows_is_an_empty_run() -> None:
    parts = parts_of([[[1, 0.5]], []], Range(None, None, 5))
    parts[1][1].rows = None
    assert merging.page(parts, 5, merging.BY_KEY) == ([[1, 0.5]], False)


def test_merged_position_is_the_max_per_topic_partition_of_answers_that_succeeded() -> None:
    rng = random.Random(22)
    for _ in range(300):
        parts: list[Part] = []
        expected: dict[tuple[str, int], int] = {}
        for i in range(rng.randrange(0, 8)):
            partition = rng.randrange(0, 3)
            offsets = {t: rng.randrange(0, 100) for t in rng.sample(["a", "b", "c"], 2)}
            answer = Answer(id=i, node="n", rows=[], offsets=offsets)
            if rng.random() < 0.4:  # NOT_UP_TO_BOUND keeps the replica's offsets: not merged
                answer.fail(rng.choice(list(Failure)), "no")
            else:
                for topic, offset in offsets.items():
                    tp = (topic, partition)
                    expected[tp] = max(expected.get(tp, offset), offset)
            parts.append((SubQuery(i, partition, "s", Get(())), answer))
        assert merging.merged_position(parts) == expected


def test_an_answer_gives_the_row_of_each_key_it_has() -> None:
    rng = random.Random(23)
    for _ in range(200):
        keys = rng.sample(range(1000), rng.randrange(0, 30))
        rows: list[Row] = [[key, f"v{key}"] for key in keys if rng.random() < 0.7]
        answer = Answer(id=0, node="n", rows=list(rows))
        expected = {row[0]: row for row in rows}
        for key in [*keys, *rng.sample(range(1000, 2000), 5)]:
            assert answer.row_of(key) == expected.get(key)
