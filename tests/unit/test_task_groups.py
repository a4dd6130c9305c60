"""The log source's task groups: every Kafka partition in exactly one group, and each group's
slice holding exactly its partitions' new records, whatever the counts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spark_pipeline.log_source import members, slices


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
