"""The log source's task groups: every Kafka partition in exactly one group, and each group's
slice holding exactly its partitions' new records, whatever the counts; a plan capped to a budget
reads about that many, moving every partition that has records waiting."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spark_pipeline.log_source import members, slices
from spark_pipeline.plan import RunPlan


@given(st.integers(1, 64), st.integers(1, 64))
def test_every_partition_is_in_exactly_one_group(partitions: int, groups: int) -> None:
    held = [p for g in range(groups) for p in members(g, partitions, groups)]
    assert sorted(held) == list(range(partitions))


@given(
    st.integers(1, 12).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.integers(1, n),
            st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=n, max_size=n),
        )
    )
)
def test_a_group_reads_its_partitions_new_records_and_no_others(
    case: tuple[int, int, list[tuple[int, int]]],
) -> None:
    partitions, groups, bounds = case
    start = {"t": {str(p): lo for p, (lo, _) in enumerate(bounds)}}
    end = {"t": {str(p): lo + more for p, (lo, more) in enumerate(bounds)}}
    found = slices(partitions, groups, start, end)
    assert [s.group for s in found] == list(range(groups))
    ranges = [r for s in found for r in s.ranges]
    waiting = {p: (lo, lo + more) for p, (lo, more) in enumerate(bounds) if more}
    assert {p: (lo, hi) for p, _, lo, hi in ranges} == waiting
    assert len(ranges) == len(waiting)
    for s in found:
        assert {p for p, *_ in s.ranges} <= set(members(s.group, partitions, groups))


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 500)), min_size=1, max_size=12),
    st.integers(1, 2000),
)
def test_a_capped_plan_reads_at_most_its_budget_and_moves_every_waiting_partition(
    waiting: list[tuple[int, int]], budget: int
) -> None:
    ranges = {"t": {p: (start, start + n) for p, (start, n) in enumerate(waiting)}}
    plan = RunPlan(ranges, [p for p, (_, n) in enumerate(waiting) if n], rebuild=False)
    capped = plan.capped(budget)
    total = plan.records({"t"})
    moving = len(plan.changed)
    assert capped.records({"t"}) <= budget + moving  # a waiting partition moves by one at least
    if total <= budget:
        assert capped == plan
    for p, (start, end) in capped.ranges["t"].items():
        assert start == ranges["t"][p][0] and start <= end <= ranges["t"][p][1]
        assert (end > start) == (ranges["t"][p][1] > start)
